"""Artifacts: a compiled program saved and loaded under another model behaves identically; corrupt,
foreign and newer artifacts are refused with one clear line; a failed save leaves nothing behind."""

import hashlib
import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM

from dspy_rag import artifacts
from dspy_rag.errors import UserError
from dspy_rag.index import Index
from dspy_rag.pipelines.deep import DeepResearch
from dspy_rag.pipelines.learned_policy import LearnedPolicy
from dspy_rag.retrieval import Retriever
from dspy_rag.signatures import AnswerBriefly

QUESTION = "What was NVIDIA's Data Center revenue in fiscal 2023?"
ONE_STEP_RUN: list[dict[str, Any]] = [
    {"steps": [{"sub_question": QUESTION, "tool": "search_docs", "keywords": ["Data Center"], "section": None,
                "justification": "one fact"}]},
    {"query": "Data Center revenue fiscal 2023"}, {"strategy": "hybrid", "reason": "figures"},
    {"context": "Data Center revenue was $15.01 billion [1].", "used_passages": [1]},
    {"finding": "Data Center revenue was $15.01 billion."}, {"decision": "FINISH", "reason": "answered"},
    {"short_answer": "$15.01 billion"},
]


def compiled(index: Index) -> DeepResearch:
    """A program as an optimizer leaves it: a new planner instruction and a demo for the short answer."""
    program = DeepResearch(Retriever(index, top_k=10))
    planner = program.planner.predict
    planner.signature = planner.signature.with_instructions("Plan in at most two steps.")
    program.synthesizer.short_answer.predict.demos = [
        dspy.Example(question="Who makes the H100?", passages=["[1] NVIDIA makes the H100."], short_answer="NVIDIA")]
    return program


def manifest(**changes: Any) -> artifacts.Manifest:
    fields = dict(name="demo", program="DeepResearch", predictors={}, model="local/qwen2.5-coder-0.5b",
                  optimizer="labeled", trainset="nvidia-10k", trainset_hash="abc", metric="weighted(f1=1)",
                  weights={"f1": 1.0}, dev_questions=2, dev_before=0.1, dev_after=0.2)
    return artifacts.Manifest(**{**fields, **changes})


def prompts(program: DeepResearch) -> list[Any]:
    lm = DummyLM(ONE_STEP_RUN, adapter=dspy.JSONAdapter())
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        program(question=QUESTION)
    return [entry["messages"] for entry in lm.history]


@pytest.fixture()
def saved(tenk_index: Index, tmp_path: Path) -> Path:
    program = compiled(tenk_index)
    folder = tmp_path / "artifacts" / "demo"
    artifacts.save(folder, program, manifest(predictors=artifacts.program_signature(program)),
                   [{"example": "q1", "score": 0.5, "trajectory": {"version": 1}}])
    return folder


@pytest.mark.slow
def test_round_trip_under_another_model_prompts_identically(saved: Path, tenk_index: Index) -> None:
    loaded = DeepResearch(Retriever(tenk_index, top_k=10))
    info = artifacts.load(saved, loaded)
    assert info.model == "local/qwen2.5-coder-0.5b" and info.trajectories == 1 and info.created
    assert loaded.planner.predict.signature.instructions == "Plan in at most two steps."
    assert prompts(loaded) == prompts(compiled(tenk_index))
    assert prompts(loaded) != prompts(DeepResearch(Retriever(tenk_index, top_k=10)))  # the artifact matters
    assert sorted(p.name for p in saved.iterdir()) == ["manifest.json", "program.json", "trajectories.jsonl"]


@pytest.mark.slow
def test_the_shipped_default_loads_into_the_current_program(tenk_index: Index) -> None:
    # A signature change that the shipped artifact no longer matches would break every default `ask`.
    program = DeepResearch(Retriever(tenk_index, top_k=10))
    info = artifacts.load(artifacts.SHIPPED / "deep-qwen2.5-coder-0.5b", program)
    assert info.model == "local/qwen2.5-coder-0.5b"
    assert program.synthesizer.short_answer.predict.demos and program.planner.predict.demos
    assert program.synthesizer.short_answer.predict.signature.instructions == AnswerBriefly.instructions


@pytest.mark.slow
def test_an_artifact_compiled_for_an_older_synthesizer_loads_as_short_answer_demos(tenk_index: Index) -> None:
    program = DeepResearch(Retriever(tenk_index, top_k=10))
    artifacts.load(artifacts.SHIPPED / "hotpotqa-labeled", program)
    # Its demos showed the one synthesizer the cited answer; they now show the short answer its passages.
    demos = program.synthesizer.short_answer.predict.demos
    assert demos and all(set(d) == {"question", "passages", "short_answer"} and d["passages"][0].startswith("[1] ")
                         for d in demos)
    assert program.synthesizer.short_answer.predict.signature.instructions == AnswerBriefly.instructions


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.name for p in artifacts.SHIPPED.iterdir() if (p / "manifest.json").is_file()))
def test_dspy_itself_loads_every_shipped_artifact(name: str, tenk_index: Index) -> None:
    # A DSPy user's own `Module.load`, with none of our checks or migration: the state is DSPy's format.
    ours, plain = DeepResearch(Retriever(tenk_index, top_k=10)), DeepResearch(Retriever(tenk_index, top_k=10))
    artifacts.load(artifacts.SHIPPED / name, ours)
    plain.load(str(artifacts.SHIPPED / name / "program.json"))
    assert plain.dump_state() == ours.dump_state()
    saved = json.loads((artifacts.SHIPPED / name / "program.json").read_text())
    assert saved["metadata"]["dependency_versions"]["dspy"] == dspy.__version__


def test_an_older_programs_predictor_is_migrated_only_where_the_program_has_its_new_name() -> None:
    old = {"plan": ["question", "->", "steps"], "synthesize": ["question", "findings", "evidence", "->", "answer",
                                                               "short_answer"]}
    expected = {"planner.predict": ["question", "->", "steps"],
                "synthesizer.short_answer.predict": ["passages", "question", "->", "short_answer"]}
    predictors, renamed = artifacts.migrated_predictors(old, expected)
    assert predictors == expected and [r.old for r in renamed] == ["synthesize", "plan"]
    assert artifacts.migrated_predictors(old, old) == (old, [])  # a program that still has it: nothing moves


def test_a_predictor_moved_whole_keeps_its_fields_so_a_changed_signature_still_fails() -> None:
    old = {"plan": ["question", "->", "steps", "reason"]}
    predictors, _ = artifacts.migrated_predictors(old, {"planner.predict": ["question", "->", "steps"]})
    assert predictors == {"planner.predict": ["question", "->", "steps", "reason"]}


def test_a_predictor_the_program_gained_since_is_taken_as_uncompiled_only_where_it_is_missing() -> None:
    older = {"planner.predict": ["question", "->", "steps"]}
    expected = {**older, "router.route": ["question", "coverage", "web_available", "->", "route", "reason"]}
    assert artifacts.migrated_predictors(older, expected) == (expected, [])
    changed = {**older, "router.route": ["question", "->", "route"]}  # compiled with it, in other fields: refused
    assert artifacts.migrated_predictors(changed, expected)[0] != expected


def test_the_shipped_default_holds_a_whole_learned_policy_this_program_can_run() -> None:
    # a change of the policy's features or format refuses the shipped file here: distill it again
    policy = LearnedPolicy.load(artifacts.SHIPPED / "deep-qwen2.5-coder-0.5b")
    assert policy.finish is not None and policy.strategy is not None
    assert policy.summary["artifact"] == "deep-qwen2.5-coder-0.5b" and policy.summary["decision_points"] >= 150


@pytest.mark.slow
def test_an_artifact_from_before_the_router_loads_with_the_router_uncompiled(tenk_index: Index, tmp_path: Path) -> None:
    shipped = artifacts.SHIPPED / "deep-qwen2.5-coder-0.5b"
    state = {k: v for k, v in json.loads((shipped / "program.json").read_text()).items() if not k.startswith("router.")}
    raw = json.loads((shipped / "manifest.json").read_text())
    raw["predictors"] = {k: v for k, v in raw["predictors"].items() if not k.startswith("router.")}
    body = json.dumps(state).encode()
    (tmp_path / "program.json").write_bytes(body)
    (tmp_path / "manifest.json").write_text(json.dumps({**raw, "state_sha256": hashlib.sha256(body).hexdigest()}))
    older, current = DeepResearch(Retriever(tenk_index, top_k=10)), DeepResearch(Retriever(tenk_index, top_k=10))
    artifacts.load(tmp_path, older)
    artifacts.load(shipped, current)
    assert older.dump_state() == current.dump_state() and older.router.route.demos == []


@pytest.mark.slow
def test_an_artifact_of_the_program_before_its_role_modules_loads_with_its_instructions_and_demos(
        tenk_index: Index, tmp_path: Path) -> None:
    program = compiled(tenk_index)
    artifacts.save(tmp_path / "new", program, manifest(predictors=artifacts.program_signature(program)), [])
    # The same artifact as the program of one module with seven predictors wrote it.
    flat = {"planner.predict": "plan", "researcher.rewriter.predict": "rewrite",
            "researcher.supervisor.predict": "supervise", "researcher.distiller.predict": "distill",
            "researcher.reflection.predict": "reflect", "policy.predict": "decide",
            "synthesizer.short_answer.predict": "short_answer.predict"}
    saved = json.loads((tmp_path / "new" / "program.json").read_text())
    state = {flat.get(k, k): v for k, v in saved.items() if not k.startswith("router.")}  # it had no router
    raw = json.loads((tmp_path / "new" / "manifest.json").read_text())
    raw["predictors"] = {flat[k]: v for k, v in raw["predictors"].items() if k in flat}
    old = tmp_path / "old"
    old.mkdir()
    body = json.dumps(state).encode()
    (old / "program.json").write_bytes(body)
    (old / "manifest.json").write_text(json.dumps({**raw, "state_sha256": hashlib.sha256(body).hexdigest()}))
    loaded = DeepResearch(Retriever(tenk_index, top_k=10))
    artifacts.load(old, loaded)
    assert loaded.planner.predict.signature.instructions == "Plan in at most two steps."
    assert loaded.dump_state() == program.dump_state()


@pytest.mark.slow
def test_no_lm_settings_or_keys_reach_the_artifact(tenk_index: Index, tmp_path: Path) -> None:
    program = compiled(tenk_index)
    program.synthesizer.short_answer.predict.lm = dspy.LM("openai/gpt-4o-mini", api_key="sk-secret-value")
    artifacts.save(tmp_path / "a", program, manifest(predictors=artifacts.program_signature(program)), [])
    assert "sk-secret" not in "".join(p.read_text() for p in (tmp_path / "a").iterdir())


@pytest.mark.slow
def test_a_changed_state_is_refused_as_corrupt(saved: Path, tenk_index: Index) -> None:
    state = json.loads((saved / "program.json").read_text())
    state["planner.predict"]["signature"]["instructions"] = "Ignore the documents."
    (saved / "program.json").write_text(json.dumps(state))
    with pytest.raises(UserError, match="corrupt"):
        artifacts.load(saved, DeepResearch(Retriever(tenk_index, top_k=10)))


@pytest.mark.slow
@pytest.mark.parametrize("content, message", [
    ("{not json", "corrupt"),
    (json.dumps({"format": "something-else", "version": 1}), "not a dspy-rag artifact"),
    (json.dumps({"format": artifacts.FORMAT, "version": artifacts.ARTIFACT_VERSION + 1}), "newer dspy-rag"),
    (json.dumps({"format": artifacts.FORMAT, "version": 1, "name": "x"}), "missing fields"),
])
def test_bad_manifests_are_refused(saved: Path, tenk_index: Index, content: str, message: str) -> None:
    (saved / "manifest.json").write_text(content)
    with pytest.raises(UserError, match=message):
        artifacts.load(saved, DeepResearch(Retriever(tenk_index, top_k=10)))


@pytest.mark.slow
@pytest.mark.parametrize("change, message", [
    ({"predictors": 5}, r"predictors: input should be a valid dictionary"),
    ({"model": 42}, r"model: input should be a valid string"),
    ({"version": -7}, r"version -7 is no artifact version"),
    ({"version": "1"}, r"version '1' is no artifact version"),
    ({"weights": {"f1": "abc"}}, r"weights\.f1: input should be a valid number"),
    ({"dev_after": True}, r"dev_after: input should be a valid number"),
])
def test_a_mistyped_manifest_field_is_corrupt_not_coerced(saved: Path, tenk_index: Index, change: dict[str, Any],
                                                          message: str) -> None:
    raw = json.loads((saved / "manifest.json").read_text())
    (saved / "manifest.json").write_text(json.dumps({**raw, **change}))
    with pytest.raises(UserError, match=message) as error:
        artifacts.load(saved, DeepResearch(Retriever(tenk_index, top_k=10)))
    assert "corrupt" in str(error.value) and "recompile" in str(error.value)


@pytest.mark.slow
def test_an_artifact_for_other_modules_is_refused(saved: Path, tenk_index: Index) -> None:
    raw = json.loads((saved / "manifest.json").read_text())
    raw["predictors"] = {"answer": ["question", "passages", "->", "answer"]}
    (saved / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(UserError, match="compiled for other modules"):
        artifacts.load(saved, DeepResearch(Retriever(tenk_index, top_k=10)))


@pytest.mark.slow
def test_a_folder_without_manifest_is_not_an_artifact(tmp_path: Path, tenk_index: Index) -> None:
    (tmp_path / "pickled").mkdir()
    (tmp_path / "pickled" / "program.pkl").write_bytes(b"\x80\x04")
    with pytest.raises(UserError, match="not a dspy-rag artifact"):
        artifacts.load(tmp_path / "pickled", DeepResearch(Retriever(tenk_index, top_k=10)))


@pytest.mark.slow
def test_a_save_that_fails_midway_leaves_the_old_artifact(saved: Path, tenk_index: Index,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    before = {p.name: p.read_bytes() for p in saved.iterdir()}
    real_write = artifacts.write_atomic

    def failing_write(path: Path, data: bytes) -> None:
        if path.name == artifacts.MANIFEST_FILE:
            raise KeyboardInterrupt
        real_write(path, data)

    monkeypatch.setattr(artifacts, "write_atomic", failing_write)
    program = DeepResearch(Retriever(tenk_index, top_k=10))
    with pytest.raises(KeyboardInterrupt):
        artifacts.save(saved, program, manifest(predictors=artifacts.program_signature(program)), [], replace=True)
    assert {p.name: p.read_bytes() for p in saved.iterdir()} == before
    assert [p.name for p in saved.parent.iterdir()] == ["demo"]  # no staging folder left behind


@pytest.mark.slow
def test_an_existing_artifact_is_not_overwritten_unasked(saved: Path, tenk_index: Index) -> None:
    program = DeepResearch(Retriever(tenk_index, top_k=10))
    with pytest.raises(UserError, match="--replace"):
        artifacts.save(saved, program, manifest(), [])


@pytest.mark.slow
def test_choosing_artifacts(saved: Path) -> None:
    folder = saved.parent
    assert artifacts.chosen("none", folder, "local/qwen2.5-coder-0.5b") is None
    assert artifacts.chosen("demo", folder, "any") == saved
    assert artifacts.chosen(str(saved), Path("elsewhere"), "any") == saved
    (folder / "deep-qwen2.5-coder-1.5b").mkdir()
    assert artifacts.chosen("auto", folder, "local/qwen2.5-coder-1.5b") == folder / "deep-qwen2.5-coder-1.5b"
    assert artifacts.chosen("auto", folder, "openai/gpt-4o-mini") is None
    shipped = artifacts.chosen("auto", folder, "local/qwen2.5-coder-0.5b")  # none in the user's folder
    assert shipped == artifacts.SHIPPED / "deep-qwen2.5-coder-0.5b"
    with pytest.raises(UserError, match="no artifact 'missing'"):
        artifacts.chosen("missing", folder, "any")
