"""Eval columns from separate results folders, paired by question: what each spends, and gains per set and over all
sets."""

from dataclasses import replace
from pathlib import Path

import pytest

from conftest import eval_row as row
from conftest import results_folder as folder_with
from dspy_rag.evals.paired_columns import column_rows, gains_table, main, paired, parting_table


def test_questions_pair_by_set_and_id_whatever_order_each_eval_ran_them(tmp_path: Path) -> None:
    ids = [f"q{n}" for n in range(10)]
    first = folder_with(tmp_path / "a", [row("s", "deep@m", q, 0.0) for q in ids] +
                        [row("t", "deep@m", q, 0.5) for q in ids] + [row("s", "other@m", "q0", 1.0)])
    # The second column got every question of set s right and left set t as it was, in reverse order.
    second = folder_with(tmp_path / "b", [row("t", "deep+auto@m", q, 0.5) for q in reversed(ids)] +
                         [row("s", "deep+auto@m", q, 1.0) for q in reversed(ids)])
    lines = gains_table(paired(column_rows(first, "deep@m"), column_rows(second, "deep+auto@m"))).splitlines()
    by_set = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in lines[2:]}
    assert set(by_set) == {"s", "t", "all"} and lines[2].startswith("| s |")
    assert by_set["s"][1:5] == ["10", "0.400 → 1.000", "+0.600 [+0.600, +0.600]", "0.000 → 1.000"]
    assert by_set["s"][6] == "10 / 0"
    assert by_set["t"][3] == "+0.000 [+0.000, +0.000]" and by_set["t"][6] == "0 / 0"
    assert by_set["all"][1:3] == ["20", "0.550 → 0.850"]


def test_columns_over_different_questions_or_a_missing_column_say_what_is_wrong(tmp_path: Path) -> None:
    first = folder_with(tmp_path / "a", [row("s", "deep@m", "q1", 1.0), row("s", "deep@m", "q2", 1.0)])
    second = folder_with(tmp_path / "b", [row("s", "deep@m", "q1", 1.0)])
    with pytest.raises(SystemExit, match=r"differ in 1 question\(s\), e.g. \('s', 'q2'\)"):
        paired(column_rows(first, "deep@m"), column_rows(second, "deep@m"))
    with pytest.raises(SystemExit, match="no column 'plain@m'; its columns are deep@m"):
        column_rows(first, "plain@m")
    with pytest.raises(SystemExit, match="no rows.jsonl with rows"):
        column_rows(tmp_path, "deep@m")


def test_three_columns_show_their_costs_and_every_pair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = [f"q{n}" for n in range(4)]
    policies = folder_with(tmp_path / "policies", [row("s", "plan", q, 0.5) for q in ids] +
                           [replace(row("s", "learned", q, 0.5), lm_calls=4, seconds=10.0) for q in ids])
    llm = folder_with(tmp_path / "llm", [replace(row("s", "llm", q, 1.0), lm_calls=6, steps=2) for q in ids])
    main([str(policies), "plan", str(llm), "llm", str(policies), "learned"])
    printed = capsys.readouterr().out
    costs = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in printed.splitlines()[2:5]}
    plan, learned, by_lm = f"plan ({policies})", f"learned ({policies})", f"llm ({llm})"
    assert costs[plan][4:9] == ["1.00", "5.00", "+0.0%", "1,000", "20.0 |"]
    assert costs[by_lm][4:7] == ["2.00", "6.00", "+20.0%"]
    assert costs[learned][5:7] == ["4.00", "-20.0%"]
    assert [line for line in printed.splitlines() if "→" in line and not line.startswith("|")] == [
        f"{plan} → {by_lm}", f"{plan} → {learned}", f"{by_lm} → {learned}"]
    with pytest.raises(SystemExit, match="usage"):
        main([str(policies), "plan", str(llm)])
    with pytest.raises(SystemExit, match="named twice"):
        main([str(policies), "plan", str(policies), "plan"])


def test_the_parting_table_splits_the_gain_by_where_the_runs_part() -> None:
    first = [row("s", "plan", f"q{n}", 1.0) for n in range(4)]
    first = [replace(r, steps=2, lm_calls=4) for r in first]
    # q0 stops a step early and loses its answer; q1 takes the same steps to a better-worded, equal answer;
    # q2 takes a step more and gains nothing; q3 is the same run.
    second = [replace(first[0], steps=1, lm_calls=2, f1=0.0, answer="other"),
              replace(first[1], answer="reworded"), replace(first[2], steps=3, lm_calls=6), first[3]]
    lines = parting_table(list(zip(first, second, strict=True))).splitlines()
    by_kind = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in lines[2:]}
    assert by_kind["fewer steps"] == ["1", "0 / 1", "-0.250", "-0.50 |"]
    assert by_kind["more steps"] == ["1", "0 / 0", "+0.000", "+0.50 |"]
    assert by_kind["as many steps, another answer"] == ["1", "0 / 0", "+0.000", "+0.00 |"]
    assert by_kind["as many steps, the same answer"][0] == "1"
