"""The planner's own metric (a plan against the gold plan) and the `planner` optimizer: GEPA on the planner's
instruction alone, end to end through `compile` with a scripted LM that plans well only once told how."""

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM

from conftest import REPLIES, scratch_config
from dspy_rag import models
from dspy_rag.config import Config
from dspy_rag.errors import UserError
from dspy_rag.evals.plan_metric import PlanMetric, match
from dspy_rag.index import Index
from dspy_rag.optimizers import compile as compiling
from dspy_rag.pipelines.programs import build_program
from dspy_rag.reporter import QUIET, Quiet, Reporter
from dspy_rag.signatures import PlanResearch, Step

QUESTION = "What city did the performer of Hello Love live in when he died?"
GOLD = [Step(sub_question="Who is the performer of Hello Love?", tool="search_docs"),
        Step(sub_question="What city did the answer of step 1 live in when he died?", tool="search_docs")]


def steps(*sub_questions: str) -> list[Step]:
    return [Step(sub_question=s, tool="search_docs") for s in sub_questions]


@pytest.mark.parametrize(("planned", "score"), [
    (steps("Who is the performer of Hello Love?", "What city did #1 live in when he died?"), 1.0),
    # one step of two, the copy matching the second gold step at F1 0.8 and the first not at all
    (steps(QUESTION), (1 / 2 + 0.8 / 2) / 2),
    (steps(QUESTION, QUESTION, QUESTION, QUESTION), (1 / 2 + 0.8 / 2) / 2),  # repeats count once
    # three steps for two, the gold steps matched at F1 0.6 ("who ... hello love") and 4/11 ("what ... city")
    (steps("Who sang Hello Love?", "Where is Hello Love from?", "What is a city?"), (2 / 3 + (0.6 + 4 / 11) / 2) / 2),
])
def test_a_plan_scores_by_its_distinct_steps_and_the_gold_steps_it_asks(planned: list[Step], score: float) -> None:
    assert match(planned, GOLD).score == pytest.approx(score, abs=0.01)


def test_the_feedback_says_what_the_plan_missed_for_the_reflection_model() -> None:
    example = dspy.Example(question=QUESTION, trainset="musique", steps=[s.model_dump() for s in GOLD])
    seen: list[float] = []
    metric = PlanMetric(lambda _example, _prediction, score: seen.append(score))
    graded = metric(example, dspy.Prediction(steps=steps(QUESTION, QUESTION)), None, "planner.predict", None)
    assert "1 more repeated an earlier step word for word" in graded.feedback
    assert "the question needs 2: 1. Who is the performer of Hello Love?" in graded.feedback
    assert "No step asks gold step 1" in graded.feedback and "?." not in graded.feedback
    # GEPA asks for feedback on plans it has scored already: only the scoring call counts in compile's progress
    assert metric(example, dspy.Prediction(steps=GOLD)) == 1.0 and seen == [1.0]


# What the reflection model proposes; the scripted planner follows it once its system prompt carries it.
INSTRUCTION = "Ask one fact per step, in the words of the gold step."
TOLD = {"Other question 1?": {"steps": [s.model_dump() for s in steps("Step of question 1?")]},
        "Other question 2?": {"steps": [s.model_dump() for s in steps("Step of question 2?")]},
        "Question 1: what": {"steps": [s.model_dump() for s in steps("What was Data Center revenue?")]}}


class Follows(DummyLM):
    """REPLIES, with the gold plans of the small sets once the system prompt holds INSTRUCTION; as the reflection
    model, INSTRUCTION."""

    def forward(self, prompt: str | None = None, messages: list[dict[str, Any]] | None = None,
                **kwargs: Any) -> Any:
        told = any(INSTRUCTION in m.get("content", "") for m in (messages or [])[:-1])
        self.answers = {"`new_instruction`": {"new_instruction": INSTRUCTION}, **(TOLD if told else {}), **REPLIES}
        return super().forward(prompt=prompt, messages=messages, **kwargs)


@pytest.fixture()
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Config:
    monkeypatch.setenv("DSPY_RAG_CACHE", str(tmp_path / "cache"))
    return scratch_config(tmp_path, **{"artifacts.path": tmp_path / "artifacts", "retrieval.reranker": "none"})


@pytest.fixture()
def follows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "build_lm", lambda _config: Follows(REPLIES, adapter=dspy.JSONAdapter()))


class Notes(Quiet):
    """The progress notes a compile gives its bars."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def start(self, label: str, total: int | None) -> None:
        self.notes.append(label)

    def advance(self, note: str) -> None:
        self.notes.append(note)


def compiled(trainset: str, settings: Config, reporter: Reporter = QUIET) -> compiling.artifacts.Manifest:
    request = compiling.CompileRequest(trainset, "planner", name="planned",
                                       settings={"max_metric_calls": 12, "minibatch": 1})
    return compiling.compile_program(request, settings, reporter)


def test_the_planner_optimizer_keeps_the_instruction_that_plans_like_the_gold_plans(
        trainset: Path, other: Path, settings: Config, follows: None) -> None:
    progress = Notes()
    manifest = compiled(f"{trainset},{other}", settings, progress)
    optimizing = [n for n in progress.notes if n.startswith("optimize (planner, ≤12 plans)")]
    assert optimizing[1].startswith("optimize (planner, ≤12 plans): plan 1 (")
    assert len(optimizing) - 1 <= 12  # GEPA's feedback calls on plans it scored already are not counted
    state = json.loads((settings.artifacts.path / "planned" / "program.json").read_text())
    instructions = {name: p["signature"]["instructions"] for name, p in state.items() if "signature" in p}
    assert INSTRUCTION in instructions.pop("planner.predict")
    uncompiled = build_program("deep", settings, Index(settings), None)
    assert instructions == {name: p.signature.instructions for name, p in uncompiled.named_predictors()
                            if name != "planner.predict"}  # every other predictor as it was
    candidates = manifest.optimizer_settings["candidates"]
    assert candidates[0]["instruction"] == PlanResearch.instructions
    assert max(c["validation"] for c in candidates[1:]) == 1.0 > candidates[0]["validation"]


def test_the_planner_optimizer_needs_gold_plans(trainset: Path, settings: Config, follows: None) -> None:
    with pytest.raises(UserError, match="found 0 train and 1 validation questions with one"):
        compiled(str(trainset), settings)


def test_plan_scores_reports_a_planner_against_the_dev_gold_plans(other: Path, trainset: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from dspy_rag.evals import plan_scores

    monkeypatch.setenv("DSPY_RAG_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    lm = Follows(REPLIES, adapter=dspy.JSONAdapter())
    monkeypatch.setattr(plan_scores, "build_lm", lambda _config: lm)
    untold = plan_scores.plan_scores(str(other), "local/qwen2.5-coder-0.5b", "none")
    assert untold["questions"] == 1 and untold["scores"] == {"p3": 0.5}  # one step of one, asking something else
    assert untold["distinct_steps"] == untold["gold_steps"] == 1.0 and untold["one_step_share"] == 1.0
    with pytest.raises(UserError, match="has a gold plan"):
        plan_scores.plan_scores(str(trainset), "local/qwen2.5-coder-0.5b", "none")  # its dev questions have none
    pooled = plan_scores.plan_scores(f"{trainset},{other}", "local/qwen2.5-coder-0.5b", "none")
    assert pooled["scores"] == {"other:p3": 0.5}  # ids of two sets may coincide


def test_plan_scores_plans_with_the_model_under_test_not_a_configured_planner_model(
        other: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dspy_rag.evals import plan_scores

    monkeypatch.setenv("DSPY_RAG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DSPY_RAG_LM_PLANNER_MODEL", "local/qwen2.5-coder-1.5b")
    monkeypatch.chdir(tmp_path)
    built: list[str] = []

    def build_lm(config: Any) -> Follows:
        built.append(config.model)
        return Follows(REPLIES, adapter=dspy.JSONAdapter())

    # every way a model is built: the planner model would be loaded through models
    monkeypatch.setattr(plan_scores, "build_lm", build_lm)
    monkeypatch.setattr(models, "build_lm", build_lm)
    scored = plan_scores.plan_scores(str(other), "local/qwen2.5-coder-0.5b", "none")
    assert built == ["local/qwen2.5-coder-0.5b"] and scored["scores"] == {"p3": 0.5}


def test_plan_scores_skips_a_configuration_already_in_its_output(other: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from dspy_rag.evals import plan_scores

    monkeypatch.setenv("DSPY_RAG_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "scores.jsonl"
    out.write_text('{"trainsets": "torn')  # a writer that crashed mid-line
    arguments = ["plan_scores", "--trainset", str(other), "--model", "local/qwen2.5-coder-0.5b", "--out", str(out)]
    monkeypatch.setattr("sys.argv", arguments)
    monkeypatch.setattr(plan_scores, "build_lm", lambda _config: Follows(REPLIES, adapter=dspy.JSONAdapter()))
    plan_scores.main()
    lines = out.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["scores"] == {"p3": 0.5}
    monkeypatch.setattr(plan_scores, "build_lm", lambda _config: pytest.fail("planned again"))
    plan_scores.main()
    assert out.read_text().splitlines() == lines and "nothing to do" in capsys.readouterr().out


def test_the_planner_alone_plans_with_the_programs_planner_model(folder: Path) -> None:
    from dspy_rag.evals.plan_metric import PlannerAlone
    from dspy_rag.pipelines.deep import DeepResearch
    from dspy_rag.retrieval import Retriever

    planner = DummyLM([{"steps": [s.model_dump() for s in GOLD]}], adapter=dspy.JSONAdapter())
    program = DeepResearch(Retriever(Index(scratch_config(folder)), top_k=4), planner_lm=planner)
    planning = PlannerAlone({"musique": program}).deepcopy()  # as GEPA copies it: the loaded model is shared
    with dspy.context(lm=DummyLM([], adapter=dspy.JSONAdapter()), adapter=dspy.JSONAdapter()):
        planned = planning(question=QUESTION, trainset="musique")
    assert planning.planner_lm is planner and match(planned.steps, GOLD).score == 1.0
