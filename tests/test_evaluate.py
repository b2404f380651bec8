"""`dspy-rag eval` with a scripted LM over a tiny real index: columns side by side, deltas, resume after an
interruption, the report files and one ledger line per column."""

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM
from typer.testing import CliRunner

from conftest import REPLIES, assert_one_line_error, invoke, scripted_lms
from dspy_rag import models
from dspy_rag.cli import app
from dspy_rag.evals import evaluate, stored_runs
from dspy_rag.evals.rows import Row
from dspy_rag.ledger import read
from dspy_rag.pipelines.baseline import BaselineRAG
from dspy_rag.pipelines.lm_calls import Unparseable
from dspy_rag.run_store import code_version


@pytest.fixture()
def scripted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[DummyLM]:
    return scripted_lms(monkeypatch, tmp_path, models)


def eval_cli(trainset: Path, out: Path, *extra: str) -> Any:
    return CliRunner().invoke(app, ["eval", "--questions", str(trainset), "--out", str(out), *extra])


def test_baseline_beside_deep_with_deltas_report_and_ledger(trainset: Path, tmp_path: Path,
                                                            scripted: list[DummyLM]) -> None:
    result = eval_cli(trainset, tmp_path / "out", "--pipeline", "deep", "--pipeline", "baseline")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    deep, baseline = report["columns"]["deep@qwen2.5-coder-0.5b"], report["columns"]["baseline@qwen2.5-coder-0.5b"]
    # both programs' scripted short answer is right for q5 and wrong for q6
    assert [r["f1"] for r in report["rows"]["deep@qwen2.5-coder-0.5b"]] == [1.0, 0.0]
    assert deep["f1"] == baseline["f1"] == 0.5 and baseline["f1_delta"] == 0.0 and "f1_delta" not in deep
    assert len(scripted) == 1  # one model, loaded once for both columns
    assert baseline["delta"] == pytest.approx(baseline["score"] - deep["score"], abs=1e-4)
    assert baseline["delta_ci"] == baseline["f1_delta_ci"] == "(too few questions for an interval)"
    assert "| deep@qwen2.5-coder-0.5b |" in (tmp_path / "out" / "report.md").read_text()
    kept = [json.loads(line) for line in (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()]
    assert [(k["pipeline"], k["id"]) for k in kept] == [("deep@qwen2.5-coder-0.5b", "q5"), ("deep@qwen2.5-coder-0.5b", "q6")]
    assert kept[0]["trajectory"]["version"] and kept[0]["trajectory"]["steps"][0]["query"]  # the baseline has none
    entries = read(tmp_path / "artifacts" / "ledger.jsonl")
    assert [(e.kind, e.artifact, e.questions) for e in entries] == [("eval", None, 2), ("eval", "baseline", 2)]
    assert entries[0].score == deep["score"]
    # asked again, every row comes from the cache: the same report, no new measurement in the ledger
    assert eval_cli(trainset, tmp_path / "out", "--pipeline", "deep", "--pipeline", "baseline").exit_code == 0
    assert json.loads((tmp_path / "out" / "results.json").read_text())["columns"]["deep@qwen2.5-coder-0.5b"] == deep
    assert len(read(tmp_path / "artifacts" / "ledger.jsonl")) == 2


def test_eval_json_prints_the_results_document_alone_on_stdout(trainset: Path, tmp_path: Path,
                                                                scripted: list[DummyLM]) -> None:
    result = eval_cli(trainset, tmp_path / "out", "--pipeline", "baseline", "--json")
    assert result.exit_code == 0, result.output
    # the whole of stdout is one document, the one written to results.json; the rows' progress goes to stderr
    assert json.loads(result.stdout) == json.loads((tmp_path / "out" / "results.json").read_text())
    assert "baseline@qwen2.5-coder-0.5b 2/2 f1" in result.stderr


def test_an_interrupted_eval_resumes_where_it_stopped(trainset: Path, tmp_path: Path, scripted: list[DummyLM],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    real = stored_runs.run_question
    asked: list[str] = []

    def interrupted(program: dspy.Module, question: Any) -> Any:
        if len(asked) == 1:
            raise KeyboardInterrupt
        asked.append(question.id)
        return real(program, question)

    monkeypatch.setattr(stored_runs, "run_question", interrupted)
    assert eval_cli(trainset, tmp_path / "out").exit_code != 0
    rows = (tmp_path / "out" / "rows.jsonl").read_text().splitlines()
    assert [Row(**json.loads(line)).id for line in rows] == ["q5"]
    monkeypatch.setattr(stored_runs, "run_question", lambda program, question: (asked.append(question.id),
                                                                              real(program, question))[1])
    assert eval_cli(trainset, tmp_path / "out").exit_code == 0
    assert asked == ["q5", "q6"]  # q5 was not asked again
    assert len(read(tmp_path / "artifacts" / "ledger.jsonl")) == 1  # only the finished eval is recorded


def test_several_sets_pool_into_one_table_beside_a_table_per_set(trainset: Path, other: Path, tmp_path: Path,
                                                                 scripted: list[DummyLM]) -> None:
    out = tmp_path / "out"
    asked = ["eval", "--questions", str(trainset), "--questions", str(other), "--out", str(out),
             "--pipeline", "baseline", "--pipeline", "deep"]
    result = CliRunner().invoke(app, asked)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "results.json").read_text())
    assert report["trainset"] == "tiny+other"
    assert report["title"].startswith("tiny+other dev, 3 questions (tiny 2, other 1)")
    deep = report["rows"]["deep@qwen2.5-coder-0.5b"]
    assert [(r["set"], r["id"], r["f1"]) for r in deep] == [("tiny", "q5", 1.0), ("tiny", "q6", 0.0),
                                                                 ("other", "p3", 0.0)]
    assert report["columns"]["deep@qwen2.5-coder-0.5b"]["f1"] == pytest.approx(1 / 3, abs=1e-4)
    by_set = {name: part["columns"]["deep@qwen2.5-coder-0.5b"]["f1"] for name, part in report["sets"].items()}
    assert by_set == {"tiny": 0.5, "other": 0.0}
    # each question was researched in its own set's documents
    kept = {k["id"]: json.dumps(k["trajectory"]) for k in map(json.loads, (out / "trajectories.jsonl").open())}
    assert "gaming.md" in kept["p3"] and "facts.md" not in kept["p3"]
    assert "facts.md" in kept["q5"] and "gaming.md" not in kept["q5"]
    shown = (out / "report.md").read_text()
    assert all(title in shown for title in ("# tiny+other dev, 3", "# tiny dev, 2", "# other dev, 1"))
    assert "other dev, 1 questions" in result.stdout
    # one ledger line per set and column, so `history` keeps each set's lineage, and one per column pooled, whose
    # runs are the sets' lines' own; asked again, all is reused
    lines = [(e.trainset, e.artifact, e.questions, e.reused, e.lm_calls > 0)
             for e in read(tmp_path / "artifacts" / "ledger.jsonl")]
    assert lines == [("tiny", "baseline", 2, 0, True), ("tiny", None, 2, 0, True),
                     ("other", "baseline", 1, 0, True), ("other", None, 1, 0, True),
                     ("tiny+other", "baseline", 3, 3, False), ("tiny+other", None, 3, 3, False)]
    again = CliRunner().invoke(app, [*asked, "--json"])
    assert json.loads(again.stdout)["runs"] == report["runs"] | {"run": 0, "reused": 6, "columns": {
        label: {"run": 0, "reused": 3} for label in report["columns"]}}
    assert len(read(tmp_path / "artifacts" / "ledger.jsonl")) == 6
    # a ledger that lacks the measurement gets it once, its runs counted as reused and costing nothing
    (tmp_path / "artifacts" / "ledger.jsonl").unlink()
    for _ in range(2):
        assert CliRunner().invoke(app, asked).exit_code == 0
    written = read(tmp_path / "artifacts" / "ledger.jsonl")
    assert [(e.trainset, e.artifact, e.reused, e.lm_calls) for e in written] == [
        ("tiny", "baseline", 2, 0), ("tiny", None, 2, 0), ("other", "baseline", 1, 0), ("other", None, 1, 0),
        ("tiny+other", "baseline", 3, 0), ("tiny+other", None, 3, 0)]
    assert {e.code_version for e in written} == {code_version()}


def test_a_compiled_column_beside_the_uncompiled_program_records_its_gain_with_an_interval(tmp_path: Path) -> None:
    from conftest import scratch_config

    def rows(label: str, f1: float) -> list[Row]:
        return [Row("tiny", label, f"q{n}", "?", "a", "a", f1, f1, f1, 1.0, 1.0, 5, 100, 1.0, 1.0, 1, None)
                for n in range(8)]

    uncompiled, compiled = evaluate.Column("deep", "none", "local/m"), evaluate.Column("deep", "v1", "local/m")
    plain = evaluate.Column("plain", "none", "local/m")
    columns = [uncompiled, compiled, plain]
    made = {uncompiled: rows("deep@m", 0.0), compiled: rows("deep+v1@m", 1.0), plain: rows("plain@m", 1.0)}
    config = scratch_config(tmp_path, **{"artifacts.path": tmp_path / "artifacts"})
    evaluate.record(config, evaluate.Measurement("tiny", "h", 8), evaluate.Measured(made, made, set()), columns,
                    {"f1": 1.0})
    lines = {e.artifact: (e.score_before, e.gain_ci) for e in read(tmp_path / "artifacts" / "ledger.jsonl")}
    # every question gains 1.0: the interval is that gain; the uncompiled program and the yardstick carry none
    assert lines == {None: (None, None), "v1": (0.0, [1.0, 1.0]), "plain": (None, None)}


def test_a_second_take_runs_every_question_again_and_is_reused_as_that_take(trainset: Path, tmp_path: Path,
                                                                            scripted: list[DummyLM]) -> None:
    def runs(out: str, *extra: str) -> tuple[int, int]:
        result = eval_cli(trainset, tmp_path / out, "--json", *extra)
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        return report["runs"]["run"], report["runs"]["reused"]

    assert runs("first") == (2, 0)
    assert runs("first-again") == (0, 2)  # the same runs, from the store
    assert runs("second", "--take", "2") == (2, 0)  # measured again
    assert runs("second-again", "--take", "2") == (0, 2)  # take 2 resumes and is reused as take 2
    assert runs("first-once-more") == (0, 2)  # take 1 is untouched by take 2
    assert json.loads((tmp_path / "second" / "results.json").read_text())["title"].endswith(", take 2")
    # a repeat adds no ledger line: the ledger holds the first take's measurement once
    assert [e.questions for e in read(tmp_path / "artifacts" / "ledger.jsonl")] == [2]


def test_a_set_named_twice_is_refused(trainset: Path, tmp_path: Path, scripted: list[DummyLM]) -> None:
    result = invoke("eval", "--questions", f"{trainset},{trainset}", "--out", str(tmp_path / "out"))
    assert_one_line_error(result, "trainset tiny is given twice; name each trainset once")
    assert not (tmp_path / "out").exists()


def test_columns_cover_every_combination_once() -> None:
    columns = evaluate.columns_of(["deep", "baseline"], ["none", "a1"], ["local/m1", "local/m2"])
    assert [c.label for c in columns] == ["deep@m1", "deep+a1@m1", "baseline@m1", "deep@m2", "deep+a1@m2",
                                          "baseline@m2"]


def test_intervals_need_enough_questions() -> None:
    assert evaluate.interval_text([1.0] * 3) == "(too few questions for an interval)"
    assert evaluate.interval_text([1.0, 0.0] * 10).startswith("[0.")
    assert evaluate.interval_text([1.0] * 10, paired_with=[0.0] * 10) == "[+1.000, +1.000]"


def test_a_question_the_program_cannot_answer_scores_zero_and_the_eval_goes_on(
        trainset: Path, tmp_path: Path, scripted: list[DummyLM], monkeypatch: pytest.MonkeyPatch) -> None:
    real = BaselineRAG.forward

    def fails_on_q6(self: BaselineRAG, question: str) -> dspy.Prediction:
        if question.startswith("Question 6"):
            raise Unparseable("the answer's output did not parse in 2 attempts")
        return real(self, question)

    monkeypatch.setattr(BaselineRAG, "forward", fails_on_q6)
    result = eval_cli(trainset, tmp_path / "out", "--pipeline", "baseline")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    rows = report["rows"]["baseline@qwen2.5-coder-0.5b"]
    assert [(r["id"], r["failed"], r["f1"]) for r in rows] == [
        ("q5", None, 1.0), ("q6", "the answer's output did not parse in 2 attempts", 0.0)]
    assert report["columns"]["baseline@qwen2.5-coder-0.5b"]["failed"] == 1


def test_an_eval_logs_each_measured_column_to_mlflow(trainset: Path, tmp_path: Path, scripted: list[DummyLM],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")  # the variable MLflow users set
    assert eval_cli(trainset, tmp_path / "out", "--pipeline", "deep", "--pipeline", "baseline").exit_code == 0
    assert eval_cli(trainset, tmp_path / "out", "--pipeline", "deep", "--pipeline", "baseline").exit_code == 0
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["dspy-rag"], output_format="list")  # the cached rerun logs nothing
    assert run.info.run_name == f"eval {report['trainset']}"
    assert run.data.metrics["deep_qwen2.5-coder-0.5b.f1"] == report["columns"]["deep@qwen2.5-coder-0.5b"]["f1"]
    assert run.data.metrics["baseline_qwen2.5-coder-0.5b.score"] == report["columns"]["baseline@qwen2.5-coder-0.5b"]["score"]


def test_a_guard_ablation_is_a_column_of_its_own_beside_the_full_program() -> None:
    columns = evaluate.columns_of(["baseline", "deep"], ["none"], ["local/m1"],
                                  switches=[evaluate.Switch("query_guard"), evaluate.Switch("distiller", on=True)])
    assert [c.label for c in columns] == ["baseline@m1", "deep@m1", "deep-without-query_guard@m1",
                                          "deep-with-distiller@m1"]


def test_an_ablation_runs_the_program_with_that_guard_off(trainset: Path, tmp_path: Path, scripted: list[DummyLM],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    off_topic = {**REPLIES, "`query`": {"query": "zzz"}}  # a query sharing no word with its sub-question
    monkeypatch.setattr(models, "build_lm", lambda _config: DummyLM(off_topic, adapter=dspy.JSONAdapter()))
    result = eval_cli(trainset, tmp_path / "out", "--without", "query_guard")
    assert result.exit_code == 0, result.output
    kept = [json.loads(line) for line in (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()]
    fired = {k["pipeline"]: {g["guard"] for g in k["trajectory"]["guards"]} for k in kept if k["id"] == "q5"}
    # only the full program replaces the off-topic query
    assert fired == {"deep@qwen2.5-coder-0.5b": {"query_guard"}, "deep-without-query_guard@qwen2.5-coder-0.5b": set()}
    assert [e.artifact for e in read(tmp_path / "artifacts" / "ledger.jsonl")] == [None]  # an ablation is no lineage
    assert eval_cli(trainset, tmp_path / "out2", "--without", "bogus").exit_code != 0


def test_a_guard_that_never_fired_leaves_its_ablation_the_full_programs_run(trainset: Path, tmp_path: Path,
                                                                            scripted: list[DummyLM]) -> None:
    result = eval_cli(trainset, tmp_path / "out", "--without", "query_guard")
    assert result.exit_code == 0, result.output
    kept = [json.loads(line) for line in (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()]
    assert all(not k["trajectory"]["guards"] for k in kept)  # the scripted queries are on topic
    assert {k["pipeline"] for k in kept} == {"deep@qwen2.5-coder-0.5b"}  # no second run
    rows = json.loads((tmp_path / "out" / "results.json").read_text())["rows"]
    full, ablation = rows["deep@qwen2.5-coder-0.5b"], rows["deep-without-query_guard@qwen2.5-coder-0.5b"]
    assert [r["same_as"] for r in ablation] == ["deep@qwen2.5-coder-0.5b"] * 2
    assert [r["answer"] for r in ablation] == [r["answer"] for r in full]
    assert "the guard never fired" in result.output


def test_a_role_ablation_runs_the_program_with_the_role_switched(trainset: Path, tmp_path: Path,
                                                                 scripted: list[DummyLM]) -> None:
    result = eval_cli(trainset, tmp_path / "out", "--with", "distiller", "--with", "reflection")
    assert result.exit_code == 0, result.output
    kept = [json.loads(line) for line in (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()]
    modules = {k["pipeline"]: {c["module"] for c in k["trajectory"]["calls"]} for k in kept if k["id"] == "q5"}
    # both optional roles are off by default: their code fallbacks stand in unless a column turns one on
    assert not {"distill", "reflect"} & modules["deep@qwen2.5-coder-0.5b"]
    assert "distill" in modules["deep-with-distiller@qwen2.5-coder-0.5b"]
    assert "reflect" in modules["deep-with-reflection@qwen2.5-coder-0.5b"]
    refused = eval_cli(trainset, tmp_path / "out2", "--with", "bogus")
    assert refused.exit_code != 0 and "unknown guard or role ['bogus']" in str(refused.exception)
    refused = eval_cli(trainset, tmp_path / "out2", "--without", "reflection")  # already off: the full program again
    assert refused.exit_code != 0 and "already has it off" in str(refused.exception)


def test_a_repair_column_runs_again_only_the_questions_with_something_to_repair(
        trainset: Path, tmp_path: Path, scripted: list[DummyLM], monkeypatch: pytest.MonkeyPatch) -> None:
    def repair_calls(out: Path) -> dict[str, list[int]]:
        """Each column's repair calls per question run (a column whose runs were all the full program's has none)."""
        calls: dict[str, list[int]] = {}
        for line in (out / "trajectories.jsonl").read_text().splitlines():
            kept = json.loads(line)
            calls.setdefault(kept["pipeline"], []).append([c["module"] for c in kept["trajectory"]["calls"]].count(
                "repair"))
        return calls

    result = eval_cli(trainset, tmp_path / "out", "--with", "repair")
    assert result.exit_code == 0, result.output
    # every scripted answer is cited where a passage states it: nothing flagged, the full program's run stands
    assert "nothing to repair" in result.output and set(repair_calls(tmp_path / "out")) == {"deep@qwen2.5-coder-0.5b"}
    uncited = {"`rewrites`": {"rewrites": [""]}, **REPLIES,
               "Question:\n": {"short_answer": "forty two flying elephants"}}  # no passage states it: flagged
    monkeypatch.setattr(models, "build_lm", lambda _config: DummyLM(uncited, adapter=dspy.JSONAdapter()))
    # another scripted model under the same name, as a new process loads it: a store of its own, or the first
    # one's runs would be reused
    monkeypatch.setattr(models, "_LOADED", {})
    monkeypatch.setenv("DSPY_RAG_RUNS", str(tmp_path / "other-runs.sqlite"))
    result = eval_cli(trainset, tmp_path / "out2", "--with", "repair")
    assert result.exit_code == 0, result.output
    assert repair_calls(tmp_path / "out2") == {"deep@qwen2.5-coder-0.5b": [0, 0],
                                               "deep-with-repair@qwen2.5-coder-0.5b": [1, 1]}


def test_the_ledger_names_the_artifact_auto_loaded(tmp_path: Path) -> None:
    from dspy_rag.artifacts import default_name

    auto = evaluate.Column("deep", "auto", "local/m")
    assert evaluate.ledger_name(auto, tmp_path) is None  # no default for this model: the uncompiled program
    (tmp_path / default_name("local/m")).mkdir()
    assert evaluate.ledger_name(auto, tmp_path) == default_name("local/m")
    assert evaluate.ledger_name(evaluate.Column("baseline", "none", "local/m"), tmp_path) == "baseline"


def test_a_planner_model_column_plans_with_its_model_and_writes_no_ledger_line(
        trainset: Path, tmp_path: Path, scripted: list[DummyLM], monkeypatch: pytest.MonkeyPatch) -> None:
    result = eval_cli(trainset, tmp_path / "out", "--planner-model", "none",
                      "--planner-model", "local/qwen2.5-coder-1.5b")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    assert list(report["columns"]) == ["deep@qwen2.5-coder-0.5b", "deep@qwen2.5-coder-0.5b+planner-qwen2.5-coder-1.5b"]

    def plans(lm: DummyLM) -> int:
        return sum("`steps`" in call["messages"][-1]["content"] for call in lm.history)

    model, planner = scripted  # the planner model loaded once, apart from the model
    assert plans(model) == 2 and plans(planner) == len(planner.history) == 2  # each column planned both questions
    entries = read(tmp_path / "artifacts" / "ledger.jsonl")
    assert [(e.artifact, e.score) for e in entries] == [(None, report["columns"]["deep@qwen2.5-coder-0.5b"]["score"])]
