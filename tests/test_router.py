"""The router role's code: what the documents cover, as it sees it, the route_check guard, and its benchmark."""

from typing import get_args

import dspy
import pytest
from dspy.utils import DummyLM

from dspy_rag import reranker as reranking
from dspy_rag.config import RoleConfig
from dspy_rag.evals.bench_router import RESEARCH_CALLS, accuracy, route_one, routing_questions
from dspy_rag.index import Index
from dspy_rag.pipelines.deep import DeepResearch
from dspy_rag.pipelines.router import MAX_SOURCES_SHOWN, MAX_TITLES_SHOWN, coverage, route_check
from dspy_rag.reranker import open_reranker
from dspy_rag.retrieval import Passage, Retriever
from dspy_rag.signatures import Route


def passage(score: float, section: str = "Item 7") -> Passage:
    return Passage("c1", "Data Center revenue was $15.01 billion.", "/data/nvda-10k.htm", section, score)


def test_coverage_names_the_files_and_few_enough_section_titles() -> None:
    assert coverage(["/data/nvda-10k.htm", "https://example.com/post"], ["Item 1A", "Item 7"]) == (
        "nvda-10k.htm, post; sections: Item 1A; Item 7")
    many = coverage([f"/d/{n}.txt" for n in range(MAX_SOURCES_SHOWN + 5)], [f"T{n}" for n in range(MAX_TITLES_SHOWN + 1)])
    assert many.endswith("and 5 more") and "sections" not in many
    assert coverage([], []) == "no documents"


def test_route_check_researches_a_declined_question_whose_passage_the_reranker_finds_relevant() -> None:
    fired = route_check("out_of_scope", [passage(-3.0), passage(6.2, "Item 7")], reranked=True)
    assert fired is not None and fired.guard == "route_check" and fired.changed == "route research"
    assert "[Item 7] 6.2" in fired.why
    assert route_check("general", [passage(6.2)], reranked=True) is not None


def test_route_check_leaves_a_route_alone_when_nothing_relevant_or_nothing_to_judge_with() -> None:
    assert route_check("out_of_scope", [passage(-3.0), passage(-0.5)], reranked=True) is None
    assert route_check("out_of_scope", [passage(9.0)], reranked=False) is None  # fused ranks are no relevance
    assert route_check("out_of_scope", [], reranked=True) is None
    assert route_check("needs_more_info", [passage(9.0)], reranked=True) is None  # documents cannot fill it in
    assert route_check("research", [passage(9.0)], reranked=True) is None


def test_the_routing_set_has_every_route_in_both_splits() -> None:
    questions = routing_questions("all")
    assert len(questions) >= 40 and len({q["id"] for q in questions}) == len(questions)
    for split in ("train", "dev"):
        assert {q["route"] for q in routing_questions(split)} == set(get_args(Route))
    assert len(routing_questions("train")) + len(routing_questions("dev")) == len(questions)


def test_accuracy_counts_declined_research_and_the_calls_routing_saves() -> None:
    rows = [{"route": "research", "chosen": "research"}, {"route": "research", "chosen": "out_of_scope"},
            {"route": "general", "chosen": "general"}, {"route": "out_of_scope", "chosen": "out_of_scope"}]
    result = accuracy(rows, "chosen")
    assert result["accuracy"] == 0.75 and result["research_declined"] == 1
    assert result["calls_saved"] == (RESEARCH_CALLS - 1) * 2 + RESEARCH_CALLS - 2
    assert result["confusion"]["research -> out_of_scope"] == 1


@pytest.mark.slow
def test_route_one_reports_the_lms_route_and_the_guarded_one_from_one_call(tenk_index: Index) -> None:
    reranker = open_reranker(str(reranking.SHIPPED / reranking.DEFAULT_NAME))
    program = DeepResearch(Retriever(tenk_index, top_k=10), reranker, roles=RoleConfig(router=True))
    lm = DummyLM([{"route": "out_of_scope", "reason": "not NVIDIA"}], adapter=dspy.JSONAdapter())
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        routed = route_one(program, "What was NVIDIA's Data Center revenue in fiscal year 2023?")
    assert (routed["unguarded"], routed["guarded"]) == ("out_of_scope", "research") and len(lm.history) == 1
