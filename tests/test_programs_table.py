"""The programs table reads eval results folders: each program's F1 and the deep program's paired gains."""

import json
from pathlib import Path

from dspy_rag.evals.programs_table import ablations, noise, table


def results(folder: Path, f1: dict[str, list[float]]) -> Path:
    folder.mkdir()
    rows = {f"{p}@m": [{"f1": x, "seconds": 10.0} for x in values] for p, values in f1.items()}
    (folder / "results.json").write_text(json.dumps({"trainset": "tiny", "rows": rows}))
    return folder


def test_the_deep_programs_gains_are_paired_over_the_same_questions(tmp_path: Path) -> None:
    folder = results(tmp_path / "programs-tiny", {"baseline": [0.0] * 10, "plain": [0.5] * 10,
                                                  "deep+auto": [1.0] * 10})
    [_, _, line] = table([folder]).splitlines()
    assert line == ("| tiny | 10 | 0.500 [0.500, 0.500] | 0.000 [0.000, 0.000] | 1.000 [1.000, 1.000] "
                    "| +1.000 [+1.000, +1.000] | +0.500 [+0.500, +0.500] | 10.0 |")


def test_a_column_run_twice_shows_how_many_questions_moved(tmp_path: Path) -> None:
    first = results(tmp_path / "a", {"plain": [1.0, 0.0] * 5})
    again = results(tmp_path / "b", {"plain": [1.0, 1.0] * 5})
    line = noise(first, again)
    assert line.startswith("tiny plain: F1 0.500 then 1.000, difference +0.500 [+0.")
    assert line.endswith("], 5 of 10 questions scored differently")


def test_each_ablation_is_paired_with_the_full_program_and_says_where_it_changed_anything(tmp_path: Path) -> None:
    folder = tmp_path / "programs-tiny"
    folder.mkdir()
    full = [{"f1": 1.0, "seconds": 1.0, "same_as": None}] * 10
    without = [{"f1": 0.0, "seconds": 1.0, "same_as": None}] * 2 + [{"f1": 1.0, "same_as": "deep+auto@m"}] * 8
    (folder / "results.json").write_text(json.dumps({"trainset": "tiny", "rows": {
        "deep+auto@m": full, "deep+auto-without-keep_going@m": without}}))
    lines = ablations(folder).splitlines()
    assert lines[0] == "tiny (10 questions), deep+auto@m: F1 1.000"
    assert lines[3].startswith("| without-keep_going | 0.800 | -0.200 [-0.") and lines[3].endswith("| 2 of 10 |")
    # the full column, not an ablation, is the deep program's in the main table
    (folder / "results.json").write_text(json.dumps({"trainset": "tiny", "rows": {
        "deep+auto-without-keep_going@m": without, "deep+auto@m": full, "plain@m": full, "baseline@m": full}}))
    assert "| 1.000 [1.000, 1.000] | +0.000" in table([folder])
