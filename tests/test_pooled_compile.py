"""`compile` on the pooled splits of two trainsets with a scripted LM: the artifact names both sets, its demos come
from both, each dev question runs on its own set's index, and `--dry-run` counts the pooled splits."""

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM
from typer.testing import CliRunner

from conftest import REPLIES, invoke, scratch_config
from dspy_rag import artifacts, models
from dspy_rag.cli import app
from dspy_rag.config import Config
from dspy_rag.errors import UserError
from dspy_rag.ledger import read
from dspy_rag.optimizers import compile as compiling
from dspy_rag.optimizers.answer_kinds import answer_kind
from dspy_rag.optimizers.teleprompters import OPTIMIZERS, optimizer_settings
from dspy_rag.trainsets.registry import load_trainset

@pytest.fixture()
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Config:
    monkeypatch.setenv("DSPY_RAG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "build_lm", lambda _config: DummyLM(REPLIES, adapter=dspy.JSONAdapter()))
    return scratch_config(tmp_path, **{"artifacts.path": tmp_path / "artifacts", "retrieval.reranker": "none"})


def test_a_pooled_compile_fits_on_both_sets_and_runs_each_on_its_own_index(
        trainset: Path, other: Path, settings: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    read_by_set: dict[str, set[str]] = {}
    real_call = compiling.Tracker.__call__

    def spy(self: compiling.Tracker, example: dspy.Example, prediction: Any, score: float) -> None:
        if prediction is not None:  # a dev run made by this compile: the documents it read
            read_by_set.setdefault(example.trainset, set()).update(Path(p.source).name for p in prediction.passages)
        real_call(self, example, prediction, score)

    monkeypatch.setattr(compiling.Tracker, "__call__", spy)
    request = compiling.CompileRequest([str(trainset), str(other)], "labeled", name="pooled")
    manifest = compiling.compile_program(request, settings)
    sets = [load_trainset(str(trainset)), load_trainset(str(other))]
    assert manifest.trainset == "tiny+other"
    assert manifest.trainsets == [{"name": s.name, "hash": s.content_hash} for s in sets]
    assert manifest.trainset_hash not in {s.content_hash for s in sets}
    assert set(manifest.dev_scores) == {"tiny:q5", "tiny:q6", "other:p3"}
    assert read_by_set == {"tiny": {"facts.md"}, "other": {"gaming.md"}}
    folder = settings.artifacts.path / "pooled"
    state = json.loads((folder / artifacts.STATE_FILE).read_text())
    demos = state["planner.predict"]["demos"]
    # three planned train questions, one a figure (tiny), one yes/no and one name (other): one of each kind
    assert {(d["trainset"], d["short_answer"]) for d in demos} == {
        ("tiny", "$15.01 billion"), ("other", "yes"), ("other", "Jensen Huang")}
    # the figure labeled by section alone is shown with the passage found in its own set's index
    short_answer, = state["synthesizer.short_answer.predict"]["demos"]
    assert (short_answer["id"], short_answer["trainset"], short_answer["short_answer"]) == ("p4", "other", "$9.07 billion")
    assert "gaming.md" in short_answer["passages"][0] and "$9.07 billion" in short_answer["passages"][0]
    assert artifacts.read_manifest(folder).trainsets == manifest.trainsets
    entry, = read(settings.artifacts.path / "ledger.jsonl")
    assert (entry.trainset, entry.trainset_hash) == ("tiny+other", manifest.trainset_hash)


def test_one_set_keeps_its_own_name_and_hash_and_old_manifests_load(trainset: Path, settings: Config) -> None:
    manifest = compiling.compile_program(compiling.CompileRequest(str(trainset), "labeled", name="one"), settings)
    tiny = load_trainset(str(trainset))
    assert (manifest.trainset, manifest.trainset_hash) == ("tiny", tiny.content_hash)
    assert manifest.trainsets == [{"name": "tiny", "hash": tiny.content_hash}]
    assert set(manifest.dev_scores) == {"q5", "q6"}
    older = artifacts.read_manifest(artifacts.SHIPPED / "hotpotqa-labeled")  # compiled before pooling
    assert older.trainset == "hotpotqa" and older.trainsets == []


def test_the_shipped_default_is_the_best_validated_draw_on_every_sets_pooled_train_split() -> None:
    shipped = artifacts.SHIPPED / "deep-qwen2.5-coder-0.5b"
    manifest = artifacts.read_manifest(shipped)
    sets = ("hotpotqa", "musique", "multihop-rag", "nvidia-10k")
    # Each set's hash is its content now: a trainset edited since would call for a recompile.
    assert manifest.trainsets == [{"name": name, "hash": load_trainset(name).content_hash} for name in sets]
    assert manifest.optimizer == "labeled-search" and manifest.optimizer_settings.get("stratify") is True
    scores = [c["validation"] for c in manifest.optimizer_settings["candidates"]]
    assert len(scores) == manifest.optimizer_settings["draws"] > 1
    demos = json.loads((shipped / "program.json").read_text())["synthesizer.short_answer.predict"]["demos"]
    assert {demo["trainset"] for demo in demos} >= {"multihop-rag"}
    assert {answer_kind(demo["short_answer"]) for demo in demos} >= {"yes/no", "name", "figure"}


def test_an_optimizer_that_runs_the_program_researches_each_train_question_on_its_own_set(
        trainset: Path, other: Path, settings: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    read_by_set: dict[str, set[str]] = {}
    real_call = compiling.Tracker.__call__

    def spy(self: compiling.Tracker, example: dspy.Example, prediction: Any, score: float) -> None:
        if prediction is not None and self.phase == "optimize":  # a train run of the optimizer's
            read_by_set.setdefault(example.trainset, set()).update(Path(p.source).name for p in prediction.passages)
        real_call(self, example, prediction, score)

    monkeypatch.setattr(compiling.Tracker, "__call__", spy)
    # bootstrap stops at its second passing run (tiny's q1 and q3 pass): the sets taken in turn, "other" ran before
    request = compiling.CompileRequest(f"{trainset},{other}", "bootstrap", name="boot")
    manifest = compiling.compile_program(request, settings)
    assert read_by_set == {"tiny": {"facts.md"}, "other": {"gaming.md"}}
    assert (manifest.trainset, manifest.optimizer) == ("tiny+other", "bootstrap")
    state = json.loads((settings.artifacts.path / "boot" / artifacts.STATE_FILE).read_text())
    # the saved program is the deep program itself, its predictors under their own names
    assert "planner.predict" in state and not any(name.startswith("programs") for name in state)
    demos = {d["question"]: d for d in state["synthesizer.short_answer.predict"]["demos"]}
    assert set(demos) == {"Question 1: what was the revenue?", "Question 3: what was the revenue?"}
    assert "facts.md" in str(demos["Question 1: what was the revenue?"]["passages"])
    trained_on = [json.loads(line)["example"] for line in (settings.artifacts.path / "boot" / "trajectories.jsonl").open()]
    assert trained_on[:3] == ["tiny:q1", "other:p1", "tiny:q2"]  # in turn, each by its set


def test_the_pooled_program_shares_one_set_of_prompts_across_sets_and_copies_apart(
        trainset: Path, other: Path, settings: Config) -> None:
    from dspy_rag.optimizers.pool import PooledProgram, SetPrograms
    from dspy_rag.pipelines.programs import build_program

    sets = [load_trainset(str(trainset)), load_trainset(str(other))]
    tools = {s.name: (s.index(settings), s.web(settings)) for s in sets}
    program = build_program("deep", settings, *tools["tiny"])
    pooled = SetPrograms(settings, tools).pooled(program)
    assert len(pooled.named_predictors()) == len(program.named_predictors())  # one set of prompts
    assert pooled.programs["other"].planner.predict is program.planner.predict
    copied = pooled.reset_copy()
    copied.programs["other"].planner.predict.demos = [dspy.Example(question="q")]
    assert copied.programs["tiny"].planner.predict.demos == [dspy.Example(question="q")]  # shared in the copy
    assert program.planner.predict.demos == []  # and apart from the original
    assert copied.first() is copied.programs["tiny"]
    routed, = PooledProgram.routed([dspy.Example(question="q", trainset="other").with_inputs("question")])
    assert routed.inputs().toDict() == {"question": "q", "trainset": "other"}


def test_a_set_named_twice_is_refused(trainset: Path, settings: Config) -> None:
    with pytest.raises(UserError, match="given twice"):
        compiling.compile_program(compiling.CompileRequest([str(trainset), str(trainset)], "labeled"), settings)


def test_stratify_is_a_switch_of_the_labeled_optimizer() -> None:
    labeled = OPTIMIZERS["labeled"]
    assert optimizer_settings(labeled, {})["stratify"] is True
    assert optimizer_settings(labeled, {"stratify": "false"})["stratify"] is False
    with pytest.raises(UserError, match="stratify takes true or false"):
        optimizer_settings(labeled, {"stratify": "maybe"})


def test_dry_run_estimates_the_pooled_run(trainset: Path, other: Path) -> None:
    repeated = CliRunner().invoke(app, ["compile", "--trainset", str(trainset), "--trainset", str(other),
                                        "--optimizer", "labeled", "--dry-run", "--json"])
    assert repeated.exit_code == 0, repeated.output
    cost = json.loads(repeated.stdout)
    assert (cost["trainset"], cost["train"], cost["dev"]) == ("tiny+other", 4 + 3, 2 + 1)
    assert cost["program_runs"] == 2 * 3 and [s["name"] for s in cost["trainsets"]] == ["tiny", "other"]
    joined = CliRunner().invoke(app, ["compile", "--trainset", f"{trainset},{other}", "--optimizer", "labeled",
                                      "--dry-run", "--train-limit", "1"])
    assert joined.exit_code == 0, joined.output
    assert "labeled on tiny+other: 2 train, 0 validation, 3 dev questions; ≤ 6 program runs" in joined.stdout
    bootstrap = invoke("compile", "--trainset", f"{trainset},{other}", "--dry-run")  # the default optimizer
    assert bootstrap.returncode == 0 and "bootstrap on tiny+other: 7 train" in bootstrap.stdout
