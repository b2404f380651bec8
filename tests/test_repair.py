"""The repair pass over the synthesizer's unsupported sentences, with a scripted LM over hand-made evidence: on and
off, kept and discarded, no call when the budget is spent, the draft as it was when the output never parses."""

from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM

from dspy_rag.config import BudgetConfig, RoleConfig
from dspy_rag.evals.evaluate import ROLES
from dspy_rag.pipelines.lm_calls import LMCalls
from dspy_rag.pipelines.research_run import ResearchRun
from dspy_rag.pipelines.synthesizer import Synthesizer
from dspy_rag.pipelines.trajectory import StepRecord, Trajectory
from dspy_rag.retrieval import Passage

QUESTION = "How did NVIDIA's Data Center and Gaming revenue change in fiscal year 2023?"
EVIDENCE = [
    Passage("p1", "NVIDIA's Data Center revenue for fiscal year 2023 was $15.01 billion, up 41% from a year ago.",
            "nvda-10k.md", "Item 7. Data Center", 1.0),
    Passage("p2", "Gaming revenue for fiscal year 2023 was $9.07 billion, down 27% from a year ago.", "nvda-10k.md",
            "Item 7. Gaming", 0.9),
]
UNSUPPORTED = "Gaming revenue fell 99% in fiscal year 2023."  # 99%: no passage states it
REWRITE = "Gaming revenue for fiscal year 2023 was $9.07 billion, down 27% [2]."
GARBAGE = {"unexpected": "field"}


def two_steps() -> list[StepRecord]:
    """Steps whose findings follow the lead: the second one's, cited by its own passage, is unsupported."""
    first = StepRecord(0, "Data Center revenue?", "search_docs", [], None, "", finding="Data Center revenue was "
                       "$15.01 billion.", used_passages=["p1"])
    second = StepRecord(1, "Gaming revenue?", "search_docs", [], None, "", finding=UNSUPPORTED, used_passages=["p2"])
    return [first, second]


def synthesize(replies: list[dict[str, Any]], repair: bool = True, budgets: BudgetConfig | None = None,
               steps: list[StepRecord] | None = None) -> tuple[dspy.Prediction, DummyLM, list[tuple[str, str]]]:
    record = Trajectory(QUESTION, "llm", "none", "off", steps=two_steps() if steps is None else steps)
    events: list[tuple[str, str]] = []
    run = ResearchRun(record, LMCalls(budgets or BudgetConfig(), record.calls), lambda *event: events.append(event))
    lm = DummyLM(replies, adapter=dspy.JSONAdapter())
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        prediction = Synthesizer(repair=repair)(question=QUESTION, findings=[s.finding for s in record.steps],
                                                evidence=EVIDENCE, run=run, kinds={})
    return prediction, lm, events


SHORT = {"short_answer": "$15.01 billion"}


def test_the_repair_role_is_off_by_default_and_measurable_as_a_column() -> None:
    assert RoleConfig().repair is False and "repair" in ROLES


def test_off_the_unsupported_sentence_stays_flagged_and_no_call_is_made() -> None:
    prediction, lm, _ = synthesize([SHORT], repair=False)
    assert len(lm.history) == 1 and prediction.trajectory.repair is None
    assert [f["sentence"] for f in prediction.flagged] == ["Gaming revenue fell 99% in fiscal year 2023."]


def test_a_repair_the_citation_check_holds_is_kept() -> None:
    prediction, lm, events = synthesize([SHORT, {"rewrites": [REWRITE]}])
    record = prediction.trajectory.repair
    assert len(lm.history) == 2 and [c.module for c in prediction.trajectory.calls] == ["answer", "repair"]
    assert record.kept and record.flagged == ["Gaming revenue fell 99% in fiscal year 2023 [2]."]
    assert record.rewrites == [REWRITE] and record.flagged_after == []
    assert prediction.flagged == [] and prediction.trajectory.citation_validity == 1.0
    assert "99%" not in prediction.answer and "down 27% [Item 7. Gaming]." in prediction.answer
    assert prediction.answer.startswith("NVIDIA's Data Center revenue for fiscal year 2023 was $15.01 billion")
    assert ("repair", "kept: the citation check flags 0 of its sentences, not 1") in events
    # the repair sees the sentence it mends, with its marker, and the same numbered evidence
    prompt = lm.history[-1]["messages"][-1]["content"]
    assert "fell 99% in fiscal year 2023 [2]." in prompt and "[2] nvda-10k.md | Item 7. Gaming" in prompt


def test_a_dropped_sentence_is_a_repair_too() -> None:
    prediction, _, _ = synthesize([SHORT, {"rewrites": [""]}])
    assert prediction.trajectory.repair.kept and prediction.flagged == []
    assert "Gaming" not in prediction.answer and "$15.01 billion" in prediction.answer


@pytest.mark.parametrize(("short", "rewrite", "why"), [
    ("$15.01 billion", "Gaming revenue fell 98% [2].", "the citation check flags 1 of its sentences, no fewer than 1"),
    # the short answer no passage states leads the answer, flagged; a repair that cites something else loses it
    ("seventy seven flying elephants", "Data Center revenue was $15.01 billion [1].",
     "it no longer states the short answer"),
])
def test_a_repair_that_is_no_better_is_discarded(short: str, rewrite: str, why: str) -> None:
    steps = None if short == "$15.01 billion" else []
    prediction, _, events = synthesize([{"short_answer": short}, {"rewrites": [rewrite]}], steps=steps)
    record = prediction.trajectory.repair
    assert not record.kept and record.why == why and record.rewrites == [rewrite]
    assert len(prediction.flagged) == 1 and rewrite.split(" [")[0] not in prediction.answer
    assert ("repair", f"discarded: {why}") in events


def test_with_the_budget_spent_repair_makes_no_call() -> None:
    prediction, lm, events = synthesize([SHORT], budgets=BudgetConfig(max_lm_calls=1))
    assert len(lm.history) == 1 and [c.module for c in prediction.trajectory.calls] == ["answer"]
    assert prediction.trajectory.repair.why == "skipped: LM-call budget (1) spent"
    assert len(prediction.flagged) == 1 and ("repair", "skipped: LM-call budget (1) spent") in events


def test_output_that_never_parses_leaves_the_draft_as_it_was() -> None:
    prediction, lm, _ = synthesize([SHORT, GARBAGE, GARBAGE])
    trajectory = prediction.trajectory
    assert len(lm.history) == 3 and trajectory.degraded == ["repair"] and trajectory.calls[-1].attempts == 2
    assert trajectory.repair.why == "skipped: its output did not parse" and not trajectory.repair.kept
    assert [f["reason"] for f in prediction.flagged] == ["the cited passage does not state this"]
    assert UNSUPPORTED.rstrip(".") in prediction.answer
    assert trajectory.to_json()["repair"]["why"] == "skipped: its output did not parse"
