"""The deep program's loop driven by a scripted LM over the real 10-K index: every branch of the policy,
the budgets, degradation on unparseable output, web errors and the citation check."""

import json
import re
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM

from dspy_rag import reranker as reranking
from dspy_rag.config import BudgetConfig, GuardConfig, RoleConfig
from dspy_rag.index import Index
from dspy_rag.pipelines.deep import DeepResearch
from dspy_rag.pipelines.guards import query_for, routed_to_web, without_steps_done
from dspy_rag.pipelines.step_answer import answer_in
from dspy_rag.pipelines.synthesizer import cited_from
from dspy_rag.pipelines.trajectory import TRAJECTORY_VERSION
from dspy_rag.reranker import open_reranker
from dspy_rag.retrieval import Passage, Retriever
from dspy_rag.signatures import Step
from dspy_rag.trainsets.formats import sub_question
from dspy_rag.web import WebSearchError

QUESTION = "How did Data Center revenue change in fiscal 2023, and what competition risk does NVIDIA list?"
GARBAGE = {"unexpected": "field"}


def plan(*sub_questions: str, tool: str = "search_docs", section: str | None = None) -> dict[str, Any]:
    return {"steps": [{"sub_question": q, "tool": tool, "keywords": ["Data Center"], "section": section,
                       "justification": "needed"} for q in sub_questions]}


def step(query: str = "Data Center revenue fiscal 2023", strategy: str | None = "hybrid",
         finding: str = "Data Center revenue was $15.01 billion.") -> list[dict[str, Any]]:
    """Rewrite, supervise (docs only), distill, reflect."""
    replies: list[dict[str, Any]] = [{"query": query}]
    if strategy:
        replies.append({"strategy": strategy, "reason": "exact figures"})
    return replies + [{"context": "Data Center revenue was $15.01 billion [1].", "used_passages": [1]},
                      {"finding": finding}]


def decide(decision: str) -> dict[str, str]:
    return {"decision": decision, "reason": "scripted"}


def synthesize(short: str = "$15.01 billion") -> dict[str, str]:
    """The short answer's plain reply."""
    return {"short_answer": short}


def run(index: Index, replies: list[dict[str, Any]], question: str = QUESTION,
        **options: Any) -> tuple[dspy.Prediction, DummyLM]:
    lm = DummyLM(replies, adapter=dspy.JSONAdapter())
    events: list[tuple[str, str]] = []
    options.setdefault("roles", RoleConfig(distiller=True, reflection=True))  # the scripted steps hold their replies
    program = DeepResearch(Retriever(index, top_k=10), on_event=lambda kind, text: events.append((kind, text)),
                           **options)
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        prediction = program(question=question)
    prediction.events = events
    return prediction, lm


@pytest.mark.slow
def test_continue_then_finish_runs_every_module_once_per_step(tenk_index: Index) -> None:
    replies = [plan("What was Data Center revenue?", "Which competition risks are listed?", section="Item 1A"),
               *step(), decide("CONTINUE"), *step("competition risk", "keyword"), decide("FINISH"), synthesize()]
    prediction, lm = run(tenk_index, replies)
    trajectory = prediction.trajectory
    assert len(lm.history) == len(replies) == trajectory.lm_calls == 12
    assert [s.decision for s in trajectory.steps] == ["CONTINUE", "FINISH"]
    assert [s.strategy for s in trajectory.steps] == ["hybrid", "keyword"]
    assert trajectory.steps[1].section == "Item 1A" and len(trajectory.steps[1].retrieved) == 10
    assert [c.module for c in trajectory.calls] == ["plan"] + ["rewrite", "supervise", "distill", "reflect",
                                                               "policy"] * 2 + ["answer"]
    assert trajectory.stopped_early is None and trajectory.degraded == []
    assert prediction.short_answer == trajectory.short_answer == "$15.01 billion"
    cited = prediction.passages[0]
    assert cited.id in [c.chunk_id for c in prediction.citations] and f"[{cited.section}]" in prediction.answer
    assert [kind for kind, _ in prediction.events][:7] == ["sources", "plan", "step", "query", "strategy", "sources",
                                                          "context"]
    assert prediction.events[0][1].startswith("for the question: ")
    # the findings reach the later modules: the second rewrite sees the first finding
    assert "$15.01 billion" in lm.history[6]["messages"][-1]["content"]


@pytest.mark.slow
@pytest.mark.parametrize("roles, skipped", [(RoleConfig(distiller=False, reflection=True), "distill"),
                                             (RoleConfig(distiller=True, reflection=False), "reflect"),
                                             (RoleConfig(distiller=False, reflection=False), "both")])
def test_a_role_switched_off_makes_no_call_and_its_code_fallback_stands_in(tenk_index: Index, roles: RoleConfig,
                                                                            skipped: str) -> None:
    one_step = step()
    if skipped in ("distill", "both"):
        one_step.remove(one_step[2])
    if skipped in ("reflect", "both"):
        one_step.remove(one_step[-1])
    prediction, lm = run(tenk_index, [plan("What was Data Center revenue?"), *one_step, decide("FINISH"),
                                      synthesize()], roles=roles)
    record = prediction.trajectory.steps[0]
    modules = [c.module for c in prediction.trajectory.calls]
    assert len(lm.history) == len(modules) and "policy" in modules and "answer" in modules
    assert ("distill" in modules) == roles.distiller and ("reflect" in modules) == roles.reflection
    passages = prediction.passages
    if not roles.distiller:  # the notes are the leading sentences of the step's first two passages
        top = [p for p in passages if p.id in {s.id for s in record.reranked}]
        assert record.context.split(".")[0] in " ".join(top[0].text.split()) and len(record.used_passages) == 2
    if not roles.reflection:
        assert record.finding == record.context.split(". ")[0].rstrip(".") + "."


@pytest.mark.slow
def test_finish_early_skips_the_rest_of_the_plan(tenk_index: Index) -> None:
    prediction, _ = run(tenk_index, [plan("Data Center revenue?", "Competition?"), *step(), decide("FINISH"),
                                     synthesize()])
    assert len(prediction.trajectory.steps) == 1 and prediction.trajectory.stopped_early is None


@pytest.mark.slow
def test_a_step_that_builds_on_an_earlier_answer_goes_on_without_asking_the_policy(tenk_index: Index) -> None:
    replies = [plan("Which segment earned the most revenue?", "What was the operating income of the answer of step 1?"),
               *step(), *step(), decide("FINISH"), synthesize()]
    prediction, lm = run(tenk_index, replies)
    trajectory = prediction.trajectory
    assert [s.decision for s in trajectory.steps] == ["CONTINUE", "FINISH"] and len(lm.history) == len(replies)
    assert trajectory.steps[0].decision_reason == "keep_going: a remaining step builds on an earlier answer"
    assert [c.module for c in trajectory.calls].count("policy") == 1  # decided before the policy, not after it
    assert trajectory.guards == [{"guard": "keep_going", "saw": "1 step(s) left",
                                  "changed": "went on without asking the policy",
                                  "why": "a remaining step builds on an earlier answer", "step": 0}]
    assert ("guard", "keep_going: went on without asking the policy (a remaining step builds on an earlier answer); "
                     "saw 1 step(s) left") in prediction.events


@pytest.mark.slow
def test_with_keep_going_off_the_policy_may_finish_a_chain_after_its_first_hop(tenk_index: Index) -> None:
    replies = [plan("Which segment earned the most revenue?", "What was the operating income of the answer of step 1?"),
               *step(), decide("FINISH"), synthesize()]
    prediction, _ = run(tenk_index, replies, guards=GuardConfig(keep_going=False))
    assert [s.decision for s in prediction.trajectory.steps] == ["FINISH"]
    assert not {g["guard"] for g in prediction.trajectory.guards} & {"web_routing", "keep_going"}


def test_the_gold_plans_hop_references_are_read_as_chain_steps() -> None:
    assert Step(sub_question=sub_question("#1 >> country"), tool="search_docs").builds_on_earlier()
    assert Step(sub_question="Who founded #2?", tool="search_docs").builds_on_earlier()
    assert not Step(sub_question="What was step-up revenue in fiscal 2023?", tool="search_docs").builds_on_earlier()


@pytest.mark.slow
def test_a_chain_step_searches_for_what_the_earlier_step_found(tenk_index: Index) -> None:
    replies = [plan("Which segment earned the most revenue?", "What was the operating income of the answer of step 1?"),
               *step(finding="The Compute & Networking segment earned $15.07 billion."),
               *step("Compute & Networking operating income"), decide("FINISH"), synthesize()]
    prediction, lm = run(tenk_index, replies)
    second = prediction.trajectory.steps[1]
    assert second.sub_question == "What was the operating income of Compute & Networking?"
    assert second.notes == ["planned as: What was the operating income of the answer of step 1?"]
    assert "the answer of step 1" not in lm.history[5]["messages"][-1]["content"]  # the second rewrite


@pytest.mark.slow
def test_references_count_from_the_plan_they_were_written_in(tenk_index: Index) -> None:
    replies = [plan("Which segment earned the most?"), *step(finding="Compute & Networking earned the most."),
               decide("REVISE"), plan("Who leads it?", "Where does the answer of step 1 work?"),
               *step(finding="Jensen Huang leads it."), *step(), decide("FINISH"), synthesize()]
    prediction, _ = run(tenk_index, replies)
    assert prediction.trajectory.steps[2].sub_question == "Where does Jensen Huang work?"


@pytest.mark.slow
def test_a_revised_plan_does_not_research_its_first_step_again(tenk_index: Index) -> None:
    replies = [plan("Which segment earned the most?", "What was its operating income?"),
               *step("segment operating income", finding="Compute & Networking earned the most."), decide("REVISE"),
               plan("Which segment earned the most?", "What was the operating income of the answer of step 1?"),
               *step("segment operating income"), decide("FINISH"), synthesize()]
    prediction, _ = run(tenk_index, replies)
    trajectory = prediction.trajectory
    assert [s.sub_question for s in trajectory.steps] == ["Which segment earned the most?",
                                                          "What was the operating income of Compute & Networking?"]
    assert trajectory.guards == [{"guard": "repeated_step", "saw": "a planned step: Which segment earned the most?",
                                  "changed": "skipped it", "why": "step 1 researched it in the same words",
                                  "step": None}]
    assert len(trajectory.plans) == 2
    # with the guard off, the revised plan researches its first step again
    unguarded = run(tenk_index, [*replies[:-3], *step("segment operating income"), decide("CONTINUE"),
                                 *replies[-3:]], guards=GuardConfig(repeated_step=False))[0].trajectory
    assert [s.sub_question for s in unguarded.steps][:2] == ["Which segment earned the most?"] * 2


def test_a_plan_asking_a_step_again_keeps_it_once_and_renumbers_its_references() -> None:
    def planned(*sub_questions: str) -> list[Step]:
        return [Step(sub_question=q, tool="search_docs") for q in sub_questions]

    steps, answers, fired = without_steps_done(planned(
        "Who founded NVIDIA?", "who founded  NVIDIA?", "Where was the answer of step 2 born?",
        "When did #3 move?"), [])
    assert [s.sub_question for s in steps] == ["Who founded NVIDIA?", "Where was the answer of step 1 born?",
                                               "When did #2 move?"]
    assert answers == [] and [(f.changed, f.why) for f in fired] == [
        ("skipped it", "the plan asks step 1's question again in the same words")]
    unchanged = planned("Who founded NVIDIA?", "Where was the answer of step 1 born?")
    assert without_steps_done(unchanged, [])[0] == unchanged
    web_then_docs = [Step(sub_question="Data Center revenue?", tool=tool) for tool in ("search_web", "search_docs")]
    assert without_steps_done(web_then_docs, [])[0] == web_then_docs  # another source is no repeat


@pytest.mark.slow
def test_a_plan_of_one_question_written_four_times_researches_it_once(tenk_index: Index) -> None:
    asked = "What was Data Center revenue in fiscal 2023?"
    replies = [plan(asked, asked, asked, asked), *step(), decide("FINISH"), synthesize()]
    trajectory = run(tenk_index, replies)[0].trajectory
    assert [s.sub_question for s in trajectory.steps] == [asked] and len(trajectory.plans[0]) == 1
    assert [(g["changed"], g["why"]) for g in trajectory.guards] == [
        ("skipped 3 copies", "the plan asks step 1's question again in the same words")]  # noted once
    # with the guard off, the plan policy researches every copy
    unguarded = run(tenk_index, [plan(asked, asked), *step(), *step(), synthesize()], policy="plan",
                    guards=GuardConfig(repeated_step=False))[0].trajectory
    assert [s.sub_question for s in unguarded.steps] == [asked, asked]


@pytest.mark.slow
def test_a_query_that_copies_an_earlier_finding_searches_the_sub_question_instead(tenk_index: Index) -> None:
    found = "Data Center revenue was $15.01 billion."
    replies = [plan("Data Center revenue?", "What competition risks does NVIDIA list?"), *step(finding=found),
               decide("CONTINUE"), *step(query=f"{found} competition risks"), decide("FINISH"), synthesize()]
    trajectory = run(tenk_index, replies)[0].trajectory
    assert trajectory.steps[1].query == "What competition risks does NVIDIA list?"
    assert [(g["guard"], g["why"], g["step"]) for g in trajectory.guards] == [
        ("query_guard", "it copied an earlier finding", 1)]
    unguarded = run(tenk_index, replies, guards=GuardConfig(query_guard=False))[0].trajectory
    assert unguarded.steps[1].query == f"{found} competition risks" and unguarded.guards == []


@pytest.mark.parametrize(("query", "copied"), [
    ("Based on NVIDIA's fiscal 2023 10-K, identify its key risks related to competition. The following ris", True),
    ("Jiménez is a part of Venezuela, which is a country located in South America.", True),
    ("percentage of Spanish Wikipedia edits from Venezuela", False),
    ("Venezuela", False),
])
def test_a_query_opening_with_an_earlier_finding_is_a_copy(query: str, copied: bool) -> None:
    findings = ["Jiménez is a part of Venezuela, which is a country located in South America.",
                "Based on NVIDIA's fiscal 2023 10-K, identify its key risks related to competition. The following "
                "risk factors should be considered in addition to the other information."]
    asked = "What share of Spanish Wikipedia edits come from Venezuela and NVIDIA's competition?"
    assert (query_for(query, asked, findings)[0] == asked) is copied


@pytest.mark.parametrize(("query", "kept"), [
    ("AI accelerator strategy", False),  # the planner's keyword, measured on the reference question
    ("competitive risk factors", True),  # stems match: "competitive" and "competition" do not, "risk" does
    ("NVIDIA competition", True),
])
def test_a_query_sharing_no_word_with_its_sub_question_searches_the_sub_question(query: str, kept: bool) -> None:
    asked = "What are the key risks related to competition?"
    searched, fired = query_for(query, asked, [])
    assert (searched == query) is kept
    assert (fired is not None and fired.why == "it shares no word with the sub-question") is not kept


@pytest.mark.parametrize(("finding", "sub_question", "answer"), [
    ("The Bubye River is found in Zimbabwe.", "What is the country where the Bubye River is found?", "Zimbabwe"),
    ("Jiménez is a part of Venezuela, in South America.", "What country is Jiménez a part of?", "Venezuela"),
    ("NVIDIA's Data Center revenue was $15.01 billion in fiscal 2023.", "What was Data Center revenue?",
     "$15.01 billion"),
    ("Oregon became a state in 1859.", "When did Oregon become a state?", "1859"),
    ("The Battle of Mine Creek was fought on October 25, 1864, in Kansas.",
     "What is the state the Battle of Mine Creek was fought?", "Kansas"),
    ("The share from Venezuela is not given in the notes.", "What share of edits came from Venezuela?", None),
])
def test_the_answer_a_finding_adds_to_its_sub_question(finding: str, sub_question: str, answer: str | None) -> None:
    assert answer_in(finding, sub_question) == answer


def test_an_unknown_earlier_answer_leaves_the_reference_in_place() -> None:
    chained = Step(sub_question="Who founded #2?", tool="search_docs")
    assert chained.resolved(["Zimbabwe"]) == chained and chained.resolved(["Zimbabwe", None]) == chained
    assert chained.resolved(["Zimbabwe", "Acme"]).sub_question == "Who founded Acme?"


@pytest.mark.slow
def test_revise_replans_from_the_findings(tenk_index: Index) -> None:
    replies = [plan("Gaming revenue?"), *step(), decide("REVISE"), plan("Data Center revenue?"), *step(),
               decide("FINISH"), synthesize()]
    prediction, lm = run(tenk_index, replies)
    trajectory = prediction.trajectory
    assert [p[0]["sub_question"] for p in trajectory.plans] == ["Gaming revenue?", "Data Center revenue?"]
    assert [s.decision for s in trajectory.steps] == ["REVISE", "FINISH"]
    replan_prompt = lm.history[6]["messages"][-1]["content"]
    assert "$15.01 billion" in replan_prompt  # the re-plan sees what was found


@pytest.mark.slow
def test_llm_continue_with_no_steps_left_finishes(tenk_index: Index) -> None:
    prediction, _ = run(tenk_index, [plan("Data Center revenue?"), *step(), decide("CONTINUE"), synthesize()])
    assert prediction.trajectory.steps[0].decision == "FINISH"


@pytest.mark.slow
def test_plan_policy_makes_no_policy_calls(tenk_index: Index) -> None:
    prediction, lm = run(tenk_index, [plan("A?", "B?"), *step(), *step(), synthesize()], policy="plan")
    assert "policy" not in [c.module for c in prediction.trajectory.calls]
    assert [s.decision for s in prediction.trajectory.steps] == ["CONTINUE", "FINISH"] and len(lm.history) == 10


@pytest.mark.slow
def test_step_budget_stops_early_and_still_answers(tenk_index: Index) -> None:
    prediction, _ = run(tenk_index, [plan("A?", "B?", "C?"), *step(), decide("CONTINUE"), synthesize()],
                        budgets=BudgetConfig(max_steps=1))
    assert "step budget (1)" in prediction.trajectory.stopped_early and "2 planned" in prediction.trajectory.stopped_early
    assert "$15.01 billion" in prediction.answer


@pytest.mark.slow
def test_lm_call_budget_keeps_one_call_for_the_answer(tenk_index: Index) -> None:
    replies = [plan("A?", "B?"), *step(), decide("CONTINUE"), *step(), synthesize()]
    prediction, lm = run(tenk_index, replies, budgets=BudgetConfig(max_lm_calls=8))
    trajectory = prediction.trajectory
    assert "LM-call budget (8)" in trajectory.stopped_early
    assert trajectory.lm_calls == len(lm.history) == 8 and trajectory.calls[-1].module == "answer"


@pytest.mark.slow
def test_time_budget_stops_before_the_first_step_and_answers_from_the_questions_own_passages(tenk_index: Index
                                                                                            ) -> None:
    prediction, lm = run(tenk_index, [synthesize()], budgets=BudgetConfig(wall_clock_seconds=1e-9))
    assert "time budget" in prediction.trajectory.stopped_early
    assert prediction.trajectory.steps == [] and len(lm.history) == 1  # the reserved call, for the answer
    assert [p.id for p in prediction.passages] == [s.id for s in prediction.trajectory.floor]
    assert "$15.01 billion" in prediction.answer and prediction.citations


@pytest.mark.slow
def test_unparseable_output_is_retried_then_degrades(tenk_index: Index) -> None:
    replies = [GARBAGE, GARBAGE, *step(), decide("FINISH"), synthesize()]
    prediction, lm = run(tenk_index, replies)
    trajectory = prediction.trajectory
    assert trajectory.plans == [[{"sub_question": QUESTION, "tool": "search_docs", "keywords": [], "section": None,
                                  "justification": "fallback: the question as is"}]]
    assert trajectory.calls[0].attempts == 2 and trajectory.degraded == ["plan"]
    assert len(lm.history) == trajectory.lm_calls == 8


@pytest.mark.slow
def test_a_retry_that_parses_is_not_degraded(tenk_index: Index) -> None:
    replies = [plan("A?"), {"query": "q"}, GARBAGE, {"strategy": "vector", "reason": "r"}, *step()[2:],
               decide("FINISH"), synthesize()]
    prediction, _ = run(tenk_index, replies)
    supervise = prediction.trajectory.calls[2]
    assert (supervise.module, supervise.attempts, supervise.degraded) == ("supervise", 2, False)
    assert prediction.trajectory.steps[0].strategy == "vector"


class FailingWeb:
    name = "failing"

    def search(self, query: str, k: int) -> list[Passage]:
        raise WebSearchError("Tavily rejected the API key (401)")


@pytest.mark.slow
def test_web_error_is_recorded_and_the_step_searches_the_documents(tenk_index: Index) -> None:
    replies = [plan("What is AMD's newest accelerator?", tool="search_web"), *step(), decide("FINISH"),
               synthesize()]
    prediction, _ = run(tenk_index, replies, web=FailingWeb())
    record = prediction.trajectory.steps[0]
    assert record.web_error == "Tavily rejected the API key (401)" and record.retrieved
    assert prediction.trajectory.web == "failing"


@pytest.mark.slow
def test_web_step_without_web_searches_the_documents(tenk_index: Index) -> None:
    replies = [plan("AMD news?", tool="search_web"), *step("AMD news"), decide("FINISH"), synthesize()]
    prediction, _ = run(tenk_index, replies)
    assert prediction.trajectory.steps[0].notes == ["web search is off; searched the documents instead"]


class StaticWeb:
    name = "static"

    def search(self, query: str, k: int) -> list[Passage]:
        return [Passage("web-1", "AMD launched the Instinct MI300X accelerator.", "https://amd.example/post",
                        "AMD blog", 1.0)]


NEWER = "What competition risks does NVIDIA list? Then find newer information about AMD's accelerators."


@pytest.mark.slow
def test_a_question_asking_for_newer_facts_sends_that_step_to_the_web(tenk_index: Index) -> None:
    replies = [plan("What competition risks does NVIDIA list?", "Find newer information about AMD's accelerators."),
               *step("NVIDIA competition risks"),
               *step("AMD accelerators", strategy=None, finding="AMD launched the Instinct MI300X."),
               decide("FINISH"), synthesize()]
    prediction, _ = run(tenk_index, replies, question=NEWER, web=StaticWeb())
    trajectory = prediction.trajectory
    # the answer is led by the sentence stating the short answer, then each step's finding, cited
    assert "AMD launched the Instinct MI300X [AMD blog]." in prediction.answer
    assert "web-1" in [c.chunk_id for c in prediction.citations]
    assert len([kind for kind, _ in prediction.events if kind == "guard"]) == len(trajectory.guards) == 2
    assert [s.tool for s in trajectory.steps] == ["search_docs", "search_web"]
    assert trajectory.guards[0] == {"guard": "web_routing",
                                    "saw": "a documents step: Find newer information about AMD's accelerators.",
                                    "changed": "sent it to the web",
                                    "why": "the question asks for newer facts than the documents hold", "step": None}
    assert trajectory.steps[0].decision_reason == "keep_going: a remaining step searches the web, which no step has yet"
    assert trajectory.steps[1].reranked[0].id == "web-1"
    # with web_routing off, the plan keeps its tools: both steps search the documents
    unrouted = run(tenk_index, [replies[0], *step("NVIDIA competition risks"), decide("CONTINUE"),
                                *step("AMD accelerators"), decide("FINISH"), synthesize()],
                   question=NEWER, web=StaticWeb(), guards=GuardConfig(web_routing=False))[0].trajectory
    assert [s.tool for s in unrouted.steps] == ["search_docs", "search_docs"] and unrouted.guards == []


@pytest.mark.slow
def test_several_steps_answer_with_the_lead_then_each_new_finding_cited(tenk_index: Index) -> None:
    risk = "Competition from 9,999 rivals is a key risk."  # a figure no passage states: flagged, not dropped
    replies = [plan("Which competition risks are listed?", "What was Data Center revenue?"),
               *step("competition risks", finding=risk), decide("CONTINUE"), *step(), decide("FINISH"), synthesize()]
    prediction, _ = run(tenk_index, replies)
    lead, *rest = prediction.draft.split(". ")
    assert "$15.01 billion" in lead and re.search(r"\[\d+\]$", lead)
    # the second step's finding says what the lead says: not repeated; the first's is added, cited, and flagged
    assert prediction.draft.count("$15.01 billion") == 1 and re.search(r"9,999 rivals is a key risk \[\d+\]\.", prediction.draft)
    assert [f["reason"] for f in prediction.flagged] == ["the cited passage does not state this"]


@pytest.mark.slow
def test_without_a_web_the_plan_keeps_its_tools_and_the_policy_its_finish(tenk_index: Index) -> None:
    replies = [plan("What competition risks does NVIDIA list?", "Find newer information about AMD's accelerators."),
               *step(), decide("FINISH"), synthesize()]
    prediction, _ = run(tenk_index, replies, question=NEWER)
    assert [s.decision for s in prediction.trajectory.steps] == ["FINISH"]
    assert not {g["guard"] for g in prediction.trajectory.guards} & {"web_routing", "keep_going"}


@pytest.mark.parametrize("question", ["When does the latest-expiring of NVIDIA's issued patents run out?",
                                      "What were NVIDIA's current liabilities at the end of fiscal 2023?"])
def test_questions_about_the_documents_own_latest_or_current_figures_stay_in_the_documents(question: str) -> None:
    steps = [Step(sub_question=question, tool="search_docs")]
    assert routed_to_web(question, steps) == (steps, [])


def test_a_plan_repeating_a_step_word_for_word_is_noted_once() -> None:
    newer = Step(sub_question="Find newer information about AMD's accelerators.", tool="search_docs")
    steps, fired = routed_to_web(NEWER, [newer, newer])
    assert [s.tool for s in steps] == ["search_web", "search_web"] and len(fired) == 1


def test_an_unsupported_sentence_cites_the_steps_passage_sharing_most_of_its_words() -> None:
    business = Passage("p1", "NVIDIA pioneered accelerated computing.", "10-K", "Item 1. Business", 1.0)
    risks = Passage("p2", "Failure to estimate customer demand properly could harm our business.", "10-K",
                    "Item 1A. Risk Factors", 1.0)
    sentence = "The risks include failure to estimate customer demand, costing 42 points of share."  # 42: unstated
    assert cited_from(sentence, [1, 2], [business, risks]).endswith("share [2].")
    assert cited_from("NVIDIA pioneered accelerated computing.", [2, 1], [business, risks]).endswith("[1].")


@pytest.mark.slow
@pytest.mark.parametrize(("short_answer", "reason"), [
    ("$15.01 billion", None),
    ("seventy seven flying elephants", "no citation"),
])
def test_the_short_answer_is_cited_where_a_passage_states_it_and_flagged_where_none_does(
        tenk_index: Index, short_answer: str, reason: str | None) -> None:
    prediction, _ = run(tenk_index, [plan("A?"), *step(), decide("FINISH"), synthesize(short=short_answer)])
    assert prediction.short_answer == short_answer
    assert [f["reason"] for f in prediction.flagged] == ([reason] if reason else [])
    assert bool(prediction.citations) == (reason is None)


@pytest.mark.slow
def test_trajectory_is_versioned_json(tenk_index: Index) -> None:
    prediction, _ = run(tenk_index, [plan("A?"), *step(), decide("FINISH"), synthesize()])
    record = json.loads(json.dumps(prediction.trajectory.to_json()))
    assert record["version"] == TRAJECTORY_VERSION and record["lm_calls"] == 7
    assert record["citation_validity"] == 1.0 and record["flagged"] == []
    assert record["citations"][0]["chunk_id"] in [p.id for p in prediction.passages]
    assert len(record["floor"]) == 4 and record["web_error"] is None
    assert set(record["steps"][0]) >= {"query", "strategy", "retrieved", "reranked", "context", "finding",
                                       "decision"}
    assert record["steps"][0]["reranked"][0]["id"] == record["steps"][0]["used_passages"][0]


def routed(route: str, reason: str = "scripted") -> dict[str, str]:
    return {"route": route, "reason": reason}


@pytest.mark.slow
def test_the_router_is_off_by_default_and_makes_no_call(tenk_index: Index) -> None:
    prediction, lm = run(tenk_index, [plan("What was Data Center revenue?"), *step(), decide("FINISH"), synthesize()])
    assert "route" not in [c.module for c in prediction.trajectory.calls]
    assert prediction.trajectory.route == "research" and len(lm.history) == 7


@pytest.mark.slow
def test_a_general_question_is_answered_from_general_knowledge_without_research(tenk_index: Index) -> None:
    prediction, lm = run(tenk_index, [routed("general", "arithmetic"), {"answer": "4"}], question="What is 2 + 2?",
                         roles=RoleConfig(router=True))
    trajectory = prediction.trajectory
    assert [c.module for c in trajectory.calls] == ["route", "general"] and len(lm.history) == 2
    assert prediction.answer == "4 (from general knowledge, not from the documents)" and prediction.short_answer == "4"
    assert trajectory.route == "general" and trajectory.steps == [] and prediction.citations == []
    assert ("route", "general: arithmetic") in prediction.events


@pytest.mark.slow
@pytest.mark.parametrize("route, says", [("out_of_scope", "The documents do not cover this (about Apple). They "
                                                          "cover: nvda-20230129.htm; sections: "),
                                         ("needs_more_info", "The question needs more to go on: about Apple")])
def test_a_question_not_researched_says_why_in_one_call(tenk_index: Index, route: str, says: str) -> None:
    prediction, lm = run(tenk_index, [routed(route, "about Apple")], question="What was Apple's iPhone revenue?",
                         roles=RoleConfig(router=True))
    assert prediction.answer.startswith(says) and len(lm.history) == 1 and prediction.trajectory.route == route
    if route == "out_of_scope":
        assert "Item 7" in prediction.answer  # what the filing covers, by its sections


@pytest.mark.slow
def test_a_routed_research_question_runs_the_research_after_one_route_call(tenk_index: Index) -> None:
    replies = [routed("research"), plan("What was Data Center revenue?"), *step(), decide("FINISH"), synthesize()]
    prediction, lm = run(tenk_index, replies, roles=RoleConfig(distiller=True, reflection=True, router=True))
    assert [c.module for c in prediction.trajectory.calls][:2] == ["route", "plan"] and len(lm.history) == 8
    assert prediction.short_answer == "$15.01 billion"


@pytest.mark.slow
def test_an_unparseable_route_is_researched_and_the_trajectory_says_so(tenk_index: Index) -> None:
    garbled = {"route": "maybe", "reason": "?"}  # no route the signature allows, twice
    replies = [garbled, garbled, plan("What was Data Center revenue?"), *step(), decide("FINISH"), synthesize()]
    prediction, _ = run(tenk_index, replies, roles=RoleConfig(distiller=True, reflection=True, router=True))
    trajectory = prediction.trajectory
    assert trajectory.degraded == ["route"] and trajectory.route == "research"
    assert trajectory.route_reason.startswith("fallback") and prediction.short_answer == "$15.01 billion"


@pytest.mark.slow
def test_route_check_researches_a_question_the_router_declines_that_the_documents_answer(tenk_index: Index) -> None:
    reranker = open_reranker(str(reranking.SHIPPED / reranking.DEFAULT_NAME))
    replies = [routed("out_of_scope", "not about the documents"), plan("What was Data Center revenue?"), *step(),
               decide("FINISH"), synthesize()]
    question = "What was NVIDIA's Data Center revenue in fiscal year 2023?"
    on, _ = run(tenk_index, replies, question=question, reranker=reranker, roles=RoleConfig(distiller=True, reflection=True, router=True))
    assert on.trajectory.route == "research" and [g["guard"] for g in on.trajectory.guards] == ["route_check"]
    assert on.short_answer == "$15.01 billion"
    off, lm = run(tenk_index, replies, question=question, reranker=reranker,
                  roles=RoleConfig(distiller=True, reflection=True, router=True), guards=GuardConfig(route_check=False))
    assert off.trajectory.route == "out_of_scope" and len(lm.history) == 1 and off.citations == []
