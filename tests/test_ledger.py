"""The ledger survives concurrent writers and crashes; `dspy-rag history` measures each compile's gain."""

import json
import multiprocessing
from dataclasses import asdict, replace
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from typer.testing import CliRunner

from conftest import assert_one_line_error, invoke, run_cli
from dspy_rag.cli import app
from dspy_rag.ledger import LEDGER_FILE, LedgerEntry, append, append_line, read

MODEL, OTHER_MODEL = "local/qwen2.5-coder-0.5b", "openai/gpt-4o-mini"
WRITERS, PER_WRITER = 4, 50
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def entry(kind: str = "compile", artifact: str | None = "v1", parent: str | None = None, score: float = 0.5,
          score_before: float | None = 0.4, model: str = MODEL, questions: int = 12,
          gain_ci: list[float] | None = None, code_version: str = "", reused: int = 0,
          trainset: str = "nvidia-10k") -> LedgerEntry:
    return LedgerEntry(kind=kind, artifact=artifact, parent=parent, model=model, trainset=trainset,
                       trainset_hash="abc123", split="dev", metric="weighted(f1=0.6,evidence=0.2,citations=0.2)",
                       score=score, score_before=score_before, questions=questions, optimizer="bootstrap",
                       gain_ci=gain_ci, code_version=code_version, reused=reused)


def test_entries_round_trip_with_the_time_filled_in(tmp_path: Path) -> None:
    ledger = tmp_path / "artifacts" / LEDGER_FILE
    written = [entry(), entry(kind="eval", artifact=None, score=0.3, score_before=None)]
    for item in written:
        append(ledger, item)
    read_back = read(ledger)
    assert [replace(item, time="") for item in read_back] == written
    assert all(item.time.endswith("+00:00") for item in read_back)
    stamped = replace(entry(), time="2025-01-02T03:04:05+00:00")
    append(ledger, stamped)
    assert read(ledger)[-1] == stamped


def test_a_missing_ledger_reads_as_empty(tmp_path: Path) -> None:
    assert read(tmp_path / LEDGER_FILE) == []
    assert not (tmp_path / LEDGER_FILE).exists()


def write_many(ledger: Path, writer: int, start: Barrier) -> None:
    start.wait()
    for number in range(PER_WRITER):
        append(ledger, entry(artifact=f"w{writer}-{number}"))


def test_concurrent_writers_never_interleave(tmp_path: Path) -> None:
    ledger = tmp_path / LEDGER_FILE
    context = multiprocessing.get_context("fork")
    start = context.Barrier(WRITERS)
    writers = [context.Process(target=write_many, args=(ledger, n, start)) for n in range(WRITERS)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(timeout=120)
        assert process.exitcode == 0
    lines = ledger.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == WRITERS * PER_WRITER + 1
    assert all(json.loads(line)["kind"] == "compile" for line in lines[:-1])
    names = sorted(item.artifact for item in read(ledger))
    assert names == sorted(f"w{w}-{n}" for w in range(WRITERS) for n in range(PER_WRITER))


def test_a_line_torn_by_a_crash_is_skipped_and_never_glued_to_the_next(tmp_path: Path) -> None:
    ledger = tmp_path / LEDGER_FILE
    good = [entry(artifact="a"), entry(artifact="b")]
    for item in good:
        append(ledger, item)
    with ledger.open("ab") as handle:
        handle.write(b'{"kind": "compile", "artifact": "torn", "sco')
    before = ledger.read_bytes()
    assert [item.artifact for item in read(ledger)] == ["a", "b"]
    assert ledger.read_bytes() == before  # reading repairs nothing

    append(ledger, entry(artifact="c"))
    after = ledger.read_bytes()
    assert after.startswith(before + b"\n{")
    assert [item.artifact for item in read(ledger)] == ["a", "b", "c"]


def test_a_line_from_a_newer_version_is_skipped(tmp_path: Path) -> None:
    ledger = tmp_path / LEDGER_FILE
    append(ledger, entry(artifact="old"))
    with ledger.open("a") as handle:
        # Whole in every field this version knows: only its version says it may mean them differently.
        handle.write(json.dumps(asdict(replace(entry(artifact="new"), version=2))) + "\n")
    append(ledger, entry(artifact="later"))
    assert [item.artifact for item in read(ledger)] == ["old", "later"]


def test_a_field_this_version_does_not_know_is_left_out(tmp_path: Path) -> None:
    ledger = tmp_path / "artifacts" / LEDGER_FILE
    ledger.parent.mkdir(parents=True)
    ledger.write_text(json.dumps(asdict(entry(artifact="later")) | {"a_later_field": 1}) + "\n")
    assert [item.artifact for item in read(ledger)] == ["later"]


@pytest.mark.parametrize("edit", [{"gain_ci": [0.1]}, {"score": "0.5"}, {"questions": True}, {"kind": "guess"},
                                  {"artifact": 3}, {"score_before": [0.4]}, {"version": "1"}])
def test_a_line_whose_fields_do_not_hold_their_types_is_skipped_and_history_still_runs(
        edit: dict[str, Any], config: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "artifacts" / LEDGER_FILE
    append(ledger, entry(artifact="v1", score=0.5))
    append_line(ledger, asdict(entry(kind="eval", artifact="v1", score=0.6, score_before=0.4)) | edit)
    assert [item.kind for item in read(ledger)] == ["compile"]
    assert "v1" in history(config).stdout


def test_an_eval_of_pooled_sets_in_another_order_is_measured_alike(config: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "artifacts" / LEDGER_FILE
    for item in [entry(artifact="v1", trainset="a+b", score=0.50),
                 entry(kind="eval", artifact="v1", trainset="a+b", score=0.50, score_before=0.40),
                 entry(kind="eval", artifact="v1", trainset="b+a", model=OTHER_MODEL, score=0.66, score_before=0.61)]:
        append(ledger, item)
    rows = json.loads(history(config, "--json").stdout)["lineages"][0]["rows"]
    assert rows[2]["kept"] == pytest.approx(0.5)


def test_a_share_of_a_home_gain_inside_noise_is_marked(config: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "artifacts" / LEDGER_FILE
    for item in [entry(artifact="v1", score=0.50),
                 entry(kind="eval", artifact="v1", score=0.50, score_before=0.40, gain_ci=[-0.02, 0.22]),
                 entry(kind="eval", artifact="v1", model=OTHER_MODEL, score=0.66, score_before=0.61)]:
        append(ledger, item)
    rows = json.loads(history(config, "--json").stdout)["lineages"][0]["rows"]
    assert rows[2]["kept"] == pytest.approx(0.5) and rows[2]["kept_against_gain_ci"] == [-0.02, 0.22]
    shown = history(config).stdout
    assert "50%?" in shown and "inside noise (its 95% interval reaches zero)" in shown


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    path = tmp_path / "dspy-rag.yaml"
    path.write_text(f"artifacts: {{path: {tmp_path / 'artifacts'}}}\n")
    return path


def history(config: Path, *flags: str) -> Result:
    result = CliRunner().invoke(app, ["history", "--config", str(config), *flags])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture()
def two_lineages(config: Path, tmp_path: Path) -> None:
    """v1 and v2 recompiled from it, with an uncompiled eval; w1 on another model, where no eval exists; x2
    recompiled from v1 for that other model."""
    ledger = tmp_path / "artifacts" / LEDGER_FILE
    for item in [
        entry(kind="eval", artifact=None, score=0.40, score_before=None),
        entry(artifact="v1", score=0.50, score_before=0.38),
        entry(artifact="w1", model=OTHER_MODEL, score=0.30, score_before=0.20),
        entry(artifact="v2", parent="v1", score=0.55, score_before=0.49, gain_ci=[0.01, 0.11]),
        entry(kind="eval", artifact="v2", score=0.53, score_before=0.40, gain_ci=[0.05, 0.20]),
        entry(artifact="x2", parent="v1", model=OTHER_MODEL, score=0.36, score_before=0.31, gain_ci=[-0.04, 0.15]),
    ]:
        append(ledger, item)


def test_history_measures_each_compile_against_its_parent_and_the_uncompiled_program(
    config: Path, two_lineages: None
) -> None:
    report = json.loads(history(config, "--json").stdout)
    found = {lineage["lineage"]: [(row["kind"], row["artifact"], row["generation"], row["delta_parent"],
                                   row["delta_uncompiled"]) for row in lineage["rows"]]
             for lineage in report["lineages"]}
    assert list(found) == ["uncompiled", "v1", "w1"]
    assert found["uncompiled"] == [("eval", None, 0, None, None)]
    assert found["v1"] == [
        ("compile", "v1", 1, None, pytest.approx(0.10)),  # against the uncompiled eval, not its own 0.38
        ("compile", "v2", 2, pytest.approx(0.05), pytest.approx(0.15)),
        ("eval", "v2", 2, None, pytest.approx(0.13)),
        # v1 was not compiled on this model: the parent's program as this compile measured it first stands in,
        # and w1's starting score (the uncompiled program on that model) is the uncompiled one.
        ("compile", "x2", 2, pytest.approx(0.05), pytest.approx(0.16)),
    ]
    # No uncompiled eval on that model: the root compile's starting score stands in.
    assert found["w1"] == [("compile", "w1", 1, None, pytest.approx(0.10))]


def test_history_prints_a_table_per_lineage(config: Path, two_lineages: None) -> None:
    output = history(config).stdout
    assert all(f"lineage {name}" in output for name in ("uncompiled", "v1", "w1"))
    assert "+0.150" in output and "+0.050" in output
    # each recompile's gain with its interval, and what the interval says
    assert "[+0.010, +0.110] a gain" in output and "[-0.040, +0.150] inside noise" in output
    rows = {row["artifact"]: row for lineage in json.loads(history(config, "--json").stdout)["lineages"]
            for row in lineage["rows"] if row["kind"] == "compile"}
    assert (rows["v2"]["gain_ci"], rows["v1"]["gain_ci"]) == ([0.01, 0.11], None)


def test_the_plot_draws_each_compiles_interval_where_it_has_one(two_lineages: None, tmp_path: Path) -> None:
    from dspy_rag.optimizers.history import gain_bars, lineages

    grouped = lineages(read(tmp_path / "artifacts" / LEDGER_FILE))
    # v2: score 0.55 from 0.49, a gain of 0.06 whose interval reaches 0.05 below and 0.05 above it
    assert [(x, y, pytest.approx(below), pytest.approx(above)) for x, y, below, above in gain_bars(grouped["v1"])] == [
        (2, 0.55, 0.05, 0.05), (2, 0.36, 0.09, 0.10)]
    assert gain_bars(grouped["w1"]) == []
    # v2's eval beside the uncompiled program: 0.53 from 0.40, its interval 0.08 below and 0.07 above
    assert [(x, y, pytest.approx(below), pytest.approx(above))
            for x, y, below, above in gain_bars(grouped["v1"], "eval")] == [(2, 0.53, 0.08, 0.07)]


def test_history_prints_an_artifact_name_as_written(config: Path, tmp_path: Path) -> None:
    append(tmp_path / "artifacts" / LEDGER_FILE, entry(artifact="[v1] draft"))  # read as markup it would vanish
    output = history(config).stdout
    assert "lineage [v1] draft" in output and " [v1] draft " in output


def test_history_of_an_empty_ledger_is_a_hint(config: Path) -> None:
    lines = history(config).stdout.strip().splitlines()
    assert len(lines) == 1 and "dspy-rag compile" in lines[0]
    assert json.loads(history(config, "--json").stdout)["lineages"] == []


def test_history_says_how_many_lines_it_could_not_read_and_refuses_a_ledger_that_is_a_folder(
        config: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "artifacts" / LEDGER_FILE
    ledger.parent.mkdir(parents=True)
    ledger.write_bytes(b"\x00\xffgarbage\n[1, 2]\n")
    shown = CliRunner().invoke(app, ["history", "--config", str(config)])
    assert shown.exit_code == 0 and "2 of the 2 lines" in shown.stderr and "holds no entries" in shown.stdout
    ledger.unlink()
    ledger.mkdir()
    assert_one_line_error(invoke("history", "--config", str(config)), "is a folder", "artifacts.path")


def test_history_plots_the_score_across_recompiles(config: Path, two_lineages: None, tmp_path: Path) -> None:
    image = tmp_path / "plots" / "history.png"
    history(config, "--plot", str(image))
    assert image.read_bytes().startswith(PNG_MAGIC)
    assert [path.name for path in image.parent.iterdir()] == ["history.png"]  # no temporary file left


def test_plotting_an_empty_ledger_is_a_one_line_error(config: Path, tmp_path: Path) -> None:
    result = run_cli("history", "--config", str(config), "--plot", "history.png", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1
    assert "dspy-rag compile" in result.stderr
    assert not (tmp_path / "history.png").exists()


def test_scores_on_different_numbers_of_questions_are_not_compared(config: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "artifacts" / LEDGER_FILE
    append(ledger, entry(kind="eval", artifact=None, score=0.40, score_before=None, questions=8))
    append(ledger, entry(artifact="small", score=0.30, score_before=0.25, questions=1))
    rows = {lineage["lineage"]: lineage["rows"] for lineage in json.loads(history(config, "--json").stdout)["lineages"]}
    # the 8-question eval is not this 1-question compile's yardstick; its own starting score is
    assert rows["small"][0]["delta_uncompiled"] == pytest.approx(0.05)


def test_scores_of_other_code_are_not_compared_and_reused_runs_are_shown(config: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "artifacts" / LEDGER_FILE
    append(ledger, entry(kind="eval", artifact=None, score=0.33, score_before=None, code_version="old"))
    append(ledger, entry(kind="eval", artifact="v1", score=0.64, score_before=None, code_version="new"))
    append(ledger, entry(kind="eval", artifact=None, score=0.59, score_before=None, code_version="new", reused=12))
    report = json.loads(history(config, "--json").stdout)
    rows = {lineage["lineage"]: lineage["rows"] for lineage in report["lineages"]}
    # the newer eval of the uncompiled program on the same code, not the older one of other code
    assert rows["v1"][0]["delta_uncompiled"] == pytest.approx(0.05)
    assert "12 (12 reused)" in history(config).stdout


def test_a_name_compiled_again_is_a_lineage_of_its_own_from_then_on(config: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "artifacts" / LEDGER_FILE
    for item in [entry(artifact="v1", score=0.45), entry(kind="eval", artifact="v1", score=0.44, score_before=None),
                 entry(artifact="v1", score=0.60), entry(kind="eval", artifact="v1", score=0.62, score_before=None)]:
        append(ledger, item)
    report = json.loads(history(config, "--json").stdout)
    assert {lineage["lineage"]: [row["score"] for row in lineage["rows"]] for lineage in report["lineages"]} == {
        "v1": [0.45, 0.44], "v1 #2": [0.60, 0.62]}


def test_an_eval_on_another_model_shows_the_share_of_the_gain_it_kept(config: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "artifacts" / LEDGER_FILE
    for item in [entry(artifact="v1", score=0.50),
                 entry(kind="eval", artifact="v1", score=0.50, score_before=0.40, gain_ci=[0.02, 0.18]),
                 entry(kind="eval", artifact="v1", model=OTHER_MODEL, score=0.66, score_before=0.62),
                 entry(kind="eval", artifact="v1", model=OTHER_MODEL, score=0.66, score_before=0.62, questions=5)]:
        append(ledger, item)
    rows = json.loads(history(config, "--json").stdout)["lineages"][0]["rows"]
    # +0.04 there of +0.10 at home; none on the home model, and none beside a home eval measured otherwise
    assert [row["kept"] for row in rows] == [None, None, pytest.approx(0.4), None]
    assert "40%" in history(config).stdout


def test_a_share_kept_prefers_a_home_gain_of_the_same_code_and_marks_one_of_other_code(
        config: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "artifacts" / LEDGER_FILE
    for item in [entry(artifact="v1", score=0.50),
                 entry(kind="eval", artifact="v1", score=0.50, score_before=0.40, code_version="old"),
                 entry(kind="eval", artifact="v1", model=OTHER_MODEL, score=0.66, score_before=0.61,
                       code_version="new"),
                 entry(kind="eval", artifact="v1", score=0.45, score_before=0.40, code_version="new"),
                 entry(kind="eval", artifact="v1", model=OTHER_MODEL, score=0.66, score_before=0.61,
                       code_version="new")]:
        append(ledger, item)
    rows = json.loads(history(config, "--json").stdout)["lineages"][0]["rows"]
    # +0.05 away: of +0.10 at home by the old code, then of +0.05 by its own code once there is one
    assert [(row["kept"], row["kept_against_code"]) for row in rows[2::2]] == [
        (pytest.approx(0.5), "old"), (pytest.approx(1.0), "new")]
    shown = history(config).stdout
    assert "50%*" in shown and "100%*" not in shown and "measured by other code" in shown


def test_a_share_kept_is_against_a_newer_home_gain_of_other_code_only_where_none_is_of_the_same(
        config: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "artifacts" / LEDGER_FILE
    for item in [entry(artifact="v1", score=0.50),
                 entry(kind="eval", artifact="v1", score=0.45, score_before=0.40, code_version="new"),
                 entry(kind="eval", artifact="v1", score=0.50, score_before=0.40, code_version="old"),
                 entry(kind="eval", artifact="v1", model=OTHER_MODEL, score=0.66, score_before=0.61,
                       code_version="new")]:
        append(ledger, item)
    rows = json.loads(history(config, "--json").stdout)["lineages"][0]["rows"]
    assert (rows[3]["kept"], rows[3]["kept_against_code"]) == (pytest.approx(1.0), "new")
    assert "measured by other code" not in history(config).stdout


def test_no_share_and_no_mark_where_the_home_gain_is_none_or_of_an_earlier_program(
        config: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "artifacts" / LEDGER_FILE
    for item in [entry(artifact="v1", score=0.50),
                 entry(kind="eval", artifact="v1", score=0.50, score_before=0.40, code_version="old"),
                 entry(artifact="v1", score=0.60),  # compiled again: another program
                 entry(kind="eval", artifact="v1", model=OTHER_MODEL, score=0.66, score_before=0.61, code_version="new"),
                 entry(kind="eval", artifact="v1", score=0.40, score_before=0.40, code_version="old"),
                 entry(kind="eval", artifact="v1", model=OTHER_MODEL, score=0.66, score_before=0.61, code_version="new")]:
        append(ledger, item)
    rows = json.loads(history(config, "--json").stdout)["lineages"][1]["rows"]
    assert [(row["kept"], row["kept_against_code"]) for row in rows[1:]] == [(None, None)] * 3
    assert "measured by other code" not in history(config).stdout

