"""The run store with real programs over a tiny real index and a scripted LM: what keys a run (a changed
prompt, demo, model, guard, setting or code version is a miss; the same run is a hit that calls no LM), pruning
to the cap, `dspy-rag runs list|prune|export|import`, eval and compile reporting the runs they reused, and an
eval killed mid-run resuming from the store."""

import gzip
import json
import signal
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM
from typer.testing import CliRunner

from conftest import (CALLS_PER_RUN, REPLIES, FakeLM, assert_one_line_error, invoke, run_cli, scratch_config,
                      scripted_lms, start_cli)
from dspy_rag import models, run_store
from dspy_rag.cli import app
from dspy_rag.config import Config
from dspy_rag.errors import UserError
from dspy_rag.evals.stored_runs import AnswerRuns
from dspy_rag.ledger import read
from dspy_rag.pipelines.programs import build_program
from dspy_rag.run_store import RunStore, code_files, run_context
from dspy_rag.trainsets.registry import Trainset, load_trainset


@pytest.fixture()
def settings(tmp_path: Path) -> Config:
    return scratch_config(tmp_path, **{"artifacts.path": tmp_path / "artifacts", "retrieval.reranker": "none"})


def answer_runs(config: Config, tiny: Trainset, store: RunStore, program: dspy.Module | None = None) -> AnswerRuns:
    program = program or build_program("deep", config, tiny.index(config), None)
    return AnswerRuns(store, run_context(program, config, tiny.name, tiny.content_hash, "deep"))


def switched(config: Config, section: str, **values: Any) -> Config:
    return config.model_copy(update={section: getattr(config, section).model_copy(update=values)})


def test_the_same_run_is_a_hit_that_calls_no_lm(trainset: Path, settings: Config, tmp_path: Path) -> None:
    tiny = load_trainset(str(trainset))
    question = tiny.questions("dev")[0]
    lm = DummyLM(REPLIES, adapter=dspy.JSONAdapter())
    with RunStore(tmp_path / "runs.sqlite", 2**20) as store, dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        runs = answer_runs(settings, tiny, store)
        assert runs.stored("deep", question) is None
        made = runs.run(build_program("deep", settings, tiny.index(settings), None), "deep", question)
        calls = len(lm.history)
        assert calls == CALLS_PER_RUN and not made.reused
    # another process, a program built anew with the same prompts: the stored run, under the caller's label
    with RunStore(tmp_path / "runs.sqlite", 2**20) as store:
        found = answer_runs(settings, tiny, store).stored("deep+x@m", question)
    assert found is not None and found.reused and len(lm.history) == calls
    assert found.row.pipeline == "deep+x@m" and found.row.f1 == made.row.f1 and found.trajectory == made.trajectory


def changed_demo(program: dspy.Module) -> None:
    program.named_predictors()[0][1].demos = [dspy.Example(question="Q?", steps=[])]


def changed_instructions(program: dspy.Module) -> None:
    name, predictor = program.named_predictors()[0]
    predictor.signature = predictor.signature.with_instructions("Plan in one step.")


@pytest.mark.parametrize("change", ["demo", "instructions", "model", "temperature", "guard", "role", "top_n",
                                    "budget", "policy", "code"])
def test_whatever_determines_a_run_keys_it(trainset: Path, settings: Config, tmp_path: Path, change: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    tiny = load_trainset(str(trainset))
    question = tiny.questions("dev")[0]
    configs = {"model": switched(settings, "lm", model="local/qwen2.5-coder-1.5b"),
               "temperature": switched(settings, "lm", temperature=0.7),
               "guard": switched(settings, "guards", query_guard=False),
               "role": switched(settings, "roles", distiller=True),
               "top_n": switched(settings, "retrieval", top_n=2),
               "budget": switched(settings, "budgets", max_steps=2)}
    with RunStore(tmp_path / "runs.sqlite", 2**20) as store:
        same = answer_runs(settings, tiny, store).key(question)
        assert answer_runs(settings, tiny, store).key(question) == same
        config = configs.get(change, settings)
        program = build_program("deep", config, tiny.index(config), None, "plan" if change == "policy" else "llm")
        if change == "demo":
            changed_demo(program)
        elif change == "instructions":
            changed_instructions(program)
        elif change == "code":  # what an edited source gives (`code_files` below checks which sources count)
            monkeypatch.setattr(run_store, "code_version", lambda: "edited")
        assert answer_runs(config, tiny, store, program).key(question) != same


def test_a_learned_policy_keys_its_runs_by_its_weights_not_its_training_summary(trainset: Path,
                                                                                 settings: Config) -> None:
    from dspy_rag.pipelines.learned_policy import Classifier, LearnedPolicy
    from dspy_rag.pipelines.policy_features import FEATURES

    tiny = load_trainset(str(trainset))
    n = len(FEATURES)

    def identity(intercept: float, summary: dict[str, Any]) -> dict[str, Any]:
        learned = LearnedPolicy(list(FEATURES), Classifier([0.0] * n, [1.0] * n, [0.0] * n, intercept, 0.5),
                                summary=summary)
        return run_store.program_identity(build_program("deep", settings, tiny.index(settings), None, "learned",
                                                        learned=learned))

    first = identity(1.0, {"created": "2026-12-05T10:00:00+00:00"})
    assert identity(1.0, {"created": "2026-12-05T11:00:00+00:00"}) == first  # distilled again to the same weights
    assert identity(2.0, {"created": "2026-12-05T10:00:00+00:00"}) != first


def test_the_code_version_covers_the_programs_prompt_signatures_and_metrics() -> None:
    names = {(f.parent.name, f.name) for f in code_files()}
    assert {("signatures", "planner.py"), ("pipelines", "deep.py"), ("evals", "metrics.py")} <= names
    assert not any(name == "reporter.py" for _, name in names)  # showing a run changes no run


def fill(store: RunStore, count: int) -> list[str]:
    context = run_store.RunContext("tiny", "m", "deep", "c")
    keys = [context.key("answer", f"question {n}") for n in range(count)]
    for n, key in enumerate(keys):
        store.put(key, context, "answer", f"q{n}", {"text": "x" * 1000})
        time.sleep(0.002)  # distinct use times: the order of least recent use is the order written
    return keys


def test_the_store_prunes_the_least_recently_used_runs_to_its_cap(tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.sqlite", 10_000) as store:
        keys = fill(store, 6)
        assert store.get(keys[0]) is not None  # used again: now the most recent
        fill_more = run_store.RunContext("tiny", "m", "deep", "c")
        for n in range(6, 12):
            store.put(fill_more.key("answer", f"question {n}"), fill_more, "answer", f"q{n}", {"text": "x" * 1000})
            time.sleep(0.002)
        assert store.payload_bytes() <= 10_000
        assert store.get(keys[0]) is not None and store.get(keys[1]) is None
    with RunStore(tmp_path / "runs.sqlite", 3_000) as smaller:  # a lower cap applies when the store is opened
        assert smaller.payload_bytes() <= 3_000 and smaller.summary()["runs"] == 2


def test_a_run_with_half_an_emoji_in_it_is_stored_and_read_back_as_it_was(tmp_path: Path) -> None:
    context = run_store.RunContext("tiny", "m", "deep", "c")
    payload = {"answer": "Google \ud83c, caf\u00e9 \U0001f3c0"}  # a lone surrogate, as json.loads gives "\\ud83c"
    with RunStore(tmp_path / "runs.sqlite", 2**20) as store:
        store.put(context.key("answer", "q"), context, "answer", "q", payload)
    with RunStore(tmp_path / "runs.sqlite", 2**20) as store:
        assert store.get(context.key("answer", "q")) == payload


def test_a_dspy_rag_process_keeps_its_runs_where_dspy_rag_runs_says(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere" / "runs.sqlite"
    with RunStore(elsewhere, 2**20) as store:
        fill(store, 2)
    listed = run_cli("runs", "list", "--json", cwd=tmp_path, env={"DSPY_RAG_RUNS": str(elsewhere)})
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["runs"] == 2
    # a test's own `dspy-rag` gets the test's store, not the developer's
    assert json.loads(run_cli("runs", "list", "--json", cwd=tmp_path).stdout)["runs"] == 0
    assert (tmp_path / "runs.sqlite").exists()
    assert_one_line_error(invoke_with_runs("x" * 300), "DSPY_RAG_RUNS", "shorter name")
    (tmp_path / "notes.txt").write_text("not a database, but some text long enough to fill a page header " * 20)
    assert_one_line_error(invoke_with_runs(str(tmp_path / "notes.txt")), "cannot be opened", "DSPY_RAG_RUNS")
    assert_one_line_error(invoke_with_runs(str(tmp_path)), "is a folder", "DSPY_RAG_RUNS")


def invoke_with_runs(path: str) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DSPY_RAG_RUNS", path)
        return invoke("runs", "list")


def test_runs_list_counts_by_set_model_and_program_and_prune_empties(tmp_path: Path) -> None:
    with RunStore(run_store.store_path(), 2**20) as store:
        fill(store, 3)
    listed = invoke("runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    summary = json.loads(listed.stdout)
    assert summary["runs"] == 3 and summary["payload_bytes"] > 3000 and summary["max_bytes"] == 512 * 2**20
    assert [(g["kind"], g["set"], g["model"], g["program"], g["runs"]) for g in summary["groups"]] == [
        ("answer", "tiny", "m", "deep", 3)]
    shown = invoke("runs", "list")
    assert "3 runs" in shown.stdout and "tiny" in shown.stdout
    pruned = invoke("runs", "prune", "--to", "0", "--json")
    assert pruned.returncode == 0 and json.loads(pruned.stdout)["dropped"] == 3
    assert json.loads(invoke("runs", "list", "--json").stdout)["runs"] == 0


def test_runs_exported_and_imported_on_another_store_are_hits_there(trainset: Path, settings: Config,
                                                                    tmp_path: Path) -> None:
    tiny = load_trainset(str(trainset))
    question = tiny.questions("dev")[0]
    lm = DummyLM(REPLIES, adapter=dspy.JSONAdapter())
    with RunStore(tmp_path / "here.sqlite", 2**20) as store, dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        made = answer_runs(settings, tiny, store).run(
            build_program("deep", settings, tiny.index(settings), None), "deep", question)
        fill(store, 2)  # another model's runs, left out by the filter
        assert store.export(tmp_path / "runs.jsonl.gz", {"model": settings.lm.model, "set_name": tiny.name}) == 1
    with RunStore(tmp_path / "there.sqlite", 2**20) as there:
        assert there.import_from(tmp_path / "runs.jsonl.gz") == (1, 0, 0)
        found = answer_runs(settings, tiny, there).stored("deep", question)
        assert found is not None and found.row.f1 == made.row.f1 and found.trajectory == made.trajectory
        assert there.import_from(tmp_path / "runs.jsonl.gz") == (0, 1, 0)  # the same run again adds nothing
        assert there.summary()["runs"] == 1
        # a run under a key asked for that is not a row this code writes: a miss, so the question runs again
        runs, other = answer_runs(settings, tiny, there), tiny.questions("dev")[1]
        there.put(runs.key(other), runs.context, "answer", other.id, {"row": {"ragas_inputs": {"a": 1}, "odd": 1}})
        assert runs.stored("deep", other) is None


def exported_lines(*lines: Any) -> bytes:
    return gzip.compress("".join(json.dumps(line) + "\n" for line in lines).encode())


RUN = {"key": "a" * 64, "kind": "answer", "set_name": "tiny", "model": "m", "program": "deep", "question_id": "q",
       "payload": json.dumps({"row": {}})}


@pytest.mark.parametrize(("data", "needle"), [
    (b"\x1f\x8b\x08 cut short", "cannot read runs"),
    (b"PK\x03\x04 a zip", "is not a file of runs"),
    (json.dumps({"runs": []}).encode(), "is not a file of runs"),
    (exported_lines({**run_store.EXPORT_HEADER, "version": 2}), "format version 2, and this dspy-rag reads version 1"),
    (exported_lines(run_store.EXPORT_HEADER, {**RUN, "key": "../../x"}), "line 2: a run's key is 64 hex digits"),
    (exported_lines(run_store.EXPORT_HEADER, RUN, {**RUN, "key": "b" * 64, "payload": "[1]"}),
     "line 3: a run's payload is a JSON object"),
    (exported_lines(run_store.EXPORT_HEADER, {**RUN, "extra": 1}), "exactly the fields"),
    (exported_lines(run_store.EXPORT_HEADER, {**RUN, "payload": "[" * 100_000}), "payload is a JSON object"),
    (exported_lines(run_store.EXPORT_HEADER, {**RUN, "program": "\ud800"}), "every field of a run is UTF-8"),
    (gzip.decompress(exported_lines(run_store.EXPORT_HEADER, RUN)) + b"[" * 200_000, "line 3: a run is a JSON obj"),
])
def test_a_file_that_is_not_an_export_is_refused_and_adds_nothing(tmp_path: Path, data: bytes,
                                                                   needle: str) -> None:
    with RunStore(run_store.store_path(), 2**20) as store:
        fill(store, 2)
    (tmp_path / "given").write_bytes(data)
    assert_one_line_error(invoke("runs", "import", str(tmp_path / "given")), needle)
    assert json.loads(invoke("runs", "list", "--json").stdout)["runs"] == 2


def test_an_import_past_the_stores_cap_is_refused_whole_and_one_that_fits_prunes_the_least_recent(
        tmp_path: Path) -> None:
    with RunStore(tmp_path / "from.sqlite", 2**20) as source:
        fill(source, 12)  # 12 KB of payload
        source.export(tmp_path / "runs.gz", {})
    (tmp_path / "plain.jsonl").write_bytes(gzip.decompress((tmp_path / "runs.gz").read_bytes()))
    with RunStore(tmp_path / "small.sqlite", 10_000) as small:
        with pytest.raises(UserError, match="take over 0.0 MB, more than the run store keeps"):
            small.import_from(tmp_path / "runs.gz")
        assert small.summary()["runs"] == 0  # the runs inserted before the cap was passed are rolled back
    with RunStore(tmp_path / "tiny.sqlite", 1000) as tiny, pytest.raises(UserError, match="line 2: over 900 bytes"):
        tiny.import_from(tmp_path / "runs.gz")  # a run larger than the store keeps
    context = run_store.RunContext("local", "m", "mine", "c")
    with RunStore(tmp_path / "mine.sqlite", 14_000) as mine:
        mine.put(context.key("answer", "mine"), context, "answer", "mine", {"text": "y" * 3000})
        added, present, dropped = mine.import_from(tmp_path / "plain.jsonl")  # a file not gzipped reads too
        assert (added, present, dropped) == (12, 0, 1) and mine.get(context.key("answer", "mine")) is None


def test_runs_export_and_import_carry_a_programs_runs_between_stores(tmp_path: Path) -> None:
    with RunStore(run_store.store_path(), 2**20) as store:
        keys = fill(store, 3)
    exported = invoke("runs", "export", str(tmp_path / "out" / "runs.gz"), "--program", "deep", "--json")
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout)["exported"] == 3
    assert invoke("runs", "export", str(tmp_path / "none.gz"), "--set", "other").stdout.startswith("exported 0")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DSPY_RAG_RUNS", str(tmp_path / "elsewhere.sqlite"))
        imported = invoke("runs", "import", str(tmp_path / "out" / "runs.gz"))
        assert imported.returncode == 0 and "imported 3 runs (0 already stored)" in imported.stdout
    with RunStore(tmp_path / "elsewhere.sqlite", 2**20) as elsewhere:
        assert all(elsewhere.get(key) == {"text": "x" * 1000} for key in keys)
    assert_one_line_error(invoke("runs", "export", str(tmp_path)), "is a folder")
    (tmp_path / "notes.md").write_text("mine")
    assert_one_line_error(invoke("runs", "export", str(tmp_path / "notes.md")), "is not an earlier export")
    assert (tmp_path / "notes.md").read_text() == "mine"
    again = invoke("runs", "export", str(tmp_path / "out" / "runs.gz"), "--set", "tiny")  # an export is replaced
    assert again.returncode == 0 and again.stdout.startswith("exported 3 runs")
    assert_one_line_error(invoke("runs", "export", str(run_store.store_path())), "is the run store itself")
    assert_one_line_error(invoke("runs", "import", str(tmp_path / "missing.gz")), "is not a file")
    assert_one_line_error(invoke("runs", "import", "/dev/zero"), "is not a file")


@pytest.fixture()
def scripted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[DummyLM]:
    """The scripted LM for eval and compile, both run from the same configuration file."""
    return scripted_lms(monkeypatch, tmp_path, models)


def cli(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_a_second_eval_reuses_every_run_and_adds_no_ledger_line(trainset: Path, tmp_path: Path,
                                                                scripted: list[DummyLM]) -> None:
    cli("eval", "--questions", str(trainset), "--out", str(tmp_path / "one"), "--pipeline", "deep",
        "--pipeline", "baseline")
    first = json.loads((tmp_path / "one" / "results.json").read_text())
    assert first["runs"]["run"] == 4 and first["runs"]["reused"] == 0
    result = cli("eval", "--questions", str(trainset), "--out", str(tmp_path / "two"), "--pipeline", "deep",
                 "--pipeline", "baseline")
    second = json.loads((tmp_path / "two" / "results.json").read_text())
    assert second["runs"] == {"run": 0, "reused": 4, "columns": {
        "deep@qwen2.5-coder-0.5b": {"run": 0, "reused": 2}, "baseline@qwen2.5-coder-0.5b": {"run": 0, "reused": 2}}}
    assert second["columns"] == first["columns"]
    assert all(not lm.history for lm in scripted[1:])  # the second eval's model was never asked
    assert "Runs: 0 run, 4 reused from the run store." in (tmp_path / "two" / "report.md").read_text()
    assert "reused from the run store" in result.output
    # the rows are the eval folder's too, as the tools that read result folders expect
    rows = (tmp_path / "two" / "rows.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in rows] == ["q5", "q6", "q5", "q6"]
    assert len(read(tmp_path / "artifacts" / "ledger.jsonl")) == 2  # the first eval's two columns only


def test_a_changed_setting_runs_the_eval_again(trainset: Path, tmp_path: Path, scripted: list[DummyLM]) -> None:
    cli("eval", "--questions", str(trainset), "--out", str(tmp_path / "out"), "--pipeline", "baseline")
    config = tmp_path / "dspy-rag.yaml"
    config.write_text(config.read_text().replace("reranker: none", "reranker: none, top_n: 2"))
    cli("eval", "--questions", str(trainset), "--out", str(tmp_path / "out"), "--pipeline", "baseline")
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    assert report["runs"]["run"] == 2 and report["runs"]["reused"] == 0  # the same folder, yet nothing stale
    entries = read(tmp_path / "artifacts" / "ledger.jsonl")
    assert [(e.artifact, e.reused) for e in entries] == [("baseline", 0), ("baseline", 0)]


def test_compile_scores_its_dev_split_from_an_evals_runs(trainset: Path, tmp_path: Path,
                                                         scripted: list[DummyLM]) -> None:
    cli("eval", "--questions", str(trainset), "--out", str(tmp_path / "out"))  # the uncompiled deep program
    result = cli("compile", "--trainset", str(trainset), "--optimizer", "labeled", "--name", "tiny-labeled", "--json")
    manifest = json.loads(result.stdout)
    # the dev run before is the eval's (the uncompiled program); the labeled demos make the run after a new one
    assert manifest["dev_reused"] == 2 and manifest["lm_calls"] == 2 * CALLS_PER_RUN
    assert "dev runs: 2 run, 2 reused from the run store" in result.stderr
    compiled = [e for e in read(tmp_path / "artifacts" / "ledger.jsonl") if e.kind == "compile"]
    assert [(e.artifact, e.reused) for e in compiled] == [("tiny-labeled", 2)]


def stored_runs_count(path: Path) -> int:
    if not path.exists():
        return 0
    with closing(sqlite3.connect(path, timeout=30)) as db:
        try:
            return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        except sqlite3.OperationalError:  # the table is not made yet
            return 0


def test_an_eval_killed_mid_run_resumes_from_the_store(trainset: Path, tmp_path: Path, fake_lm: FakeLM) -> None:
    env = {**fake_lm.env, "DSPY_RAG_CACHE": str(tmp_path / "cache"), "DSPY_RAG_RETRIEVAL_RERANKER": "none"}
    args = ("eval", "--questions", str(trainset), "--out", str(tmp_path / "out"))
    fake_lm.delay = 0.3  # each question takes seconds: the kill comes while the second one runs
    store = tmp_path / "runs.sqlite"  # the test's own ($DSPY_RAG_RUNS, conftest)
    running = start_cli(*args, cwd=tmp_path, env=env)
    deadline = time.monotonic() + 300
    while stored_runs_count(store) < 1:
        assert running.poll() is None and time.monotonic() < deadline, running.communicate()[1]
        time.sleep(0.1)
    running.send_signal(signal.SIGKILL)
    running.wait(timeout=30)
    assert stored_runs_count(store) == 1  # the first question's run, whole; the one in flight is lost
    asked = len(fake_lm.requests)
    fake_lm.delay = 0.0
    finished = start_cli(*args, "--json", cwd=tmp_path, env=env)
    stdout, stderr = finished.communicate(timeout=300)
    assert finished.returncode == 0, stderr
    report = json.loads(stdout)
    assert report["runs"]["run"] == 1 and report["runs"]["reused"] == 1
    new = [json.dumps(payload) for _, payload in fake_lm.requests[asked:]]
    assert not any("Question 5" in text for text in new) and any("Question 6" in text for text in new)
    assert [r["id"] for r in next(iter(report["rows"].values()))] == ["q5", "q6"]
