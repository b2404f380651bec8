"""The learned research policy: features of recorded and live decision points, stop and re-plan labels from
scripted runs, the JSON classifiers' round trip and refusals, `ask --policy learned` without a policy LM call,
and `distill-policy` end to end with a scripted LM over a tiny real index."""

import json
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, get_args

import dspy
import numpy as np
import pytest
from dspy.utils import DummyLM
from test_deep import QUESTION, plan, step

from conftest import FACTS, assert_one_line_error, invoke, scratch_config
from dspy_rag import artifacts, models
from dspy_rag.config import Config, RoleConfig
from dspy_rag.errors import UserError
from dspy_rag.evals.research_metric import DEFAULT_WEIGHTS, ResearchMetric, example_of
from dspy_rag.index import Index
from dspy_rag.ledger import read
from dspy_rag.optimizers.distill_policy import (
    Dataset,
    classifier_of,
    cross_validated_chooser,
    fit_classifier,
    fit_part,
    fit_policy,
    report,
)
from dspy_rag.optimizers.policy_labels import (
    SearchedStep,
    TracedQuestion,
    searched_every_way,
    stop_labels,
    trace_question,
)
from dspy_rag.pipelines.deep import DeepResearch
from dspy_rag.pipelines.learned_policy import POLICY_FILE, Classifier, LearnedPolicy
from dspy_rag.pipelines.policy_features import FEATURES, decision_points, feature_values, live_point
from dspy_rag.pipelines.programs import PolicyChoice, build_program, policy_of
from dspy_rag.pipelines.strategy_chooser import QUERY_FEATURES, STRATEGIES, StrategyChooser
from dspy_rag.pipelines.trajectory import CallRecord, Scored, StepRecord, Trajectory
from dspy_rag.retrieval import Passage, Retriever
from dspy_rag.trainsets.formats import Question
from dspy_rag.trainsets.registry import load_trainset

# --- features -----------------------------------------------------------------------------------------------

ASKED = "What was NVIDIA's Data Center revenue in fiscal 2023?"  # keywords nvidia data center revenu fiscal 2023
FINDINGS = ["Data Center revenue was $15.01 billion.",          # covers data center revenu: 3 of 6 keywords
            "NVIDIA's revenue rose 41% in fiscal 2023.",          # and nvidia fiscal 2023: all 6
            "Nothing was found for: What did AMD launch?"]
VECTORS = {FINDINGS[0]: [1.0, 0.0], FINDINGS[1]: [0.6, 0.8], FINDINGS[2]: [0.0, 1.0]}


def fake_embed(texts: list[str]) -> np.ndarray:
    return np.array([VECTORS[t] for t in texts])


def scored(*pairs: tuple[str, float]) -> list[Scored]:
    return [Scored(pid, "10-k.htm", "Item 7", score) for pid, score in pairs]


def call(module: str, step_index: int | None, attempts: int = 1, degraded: bool = False) -> CallRecord:
    return CallRecord(module, step_index, 1.0, attempts, 100, 20, degraded)


def recorded() -> Trajectory:
    """Three steps: docs, then a failed web search that ends in REVISE, then one step of the new plan that
    finds nothing. Per call 120 tokens; step 1's distiller needed a retry and degraded."""
    first = StepRecord(0, "Data Center revenue?", "search_docs", [], None, "", retrieved=scored(
        ("a", 0.9), ("b", 0.5), ("c", 0.1)), reranked=scored(("a", 4.0), ("b", 2.0)), finding=FINDINGS[0],
        decision="CONTINUE")
    second = StepRecord(1, "Growth?", "search_web", [], None, "", retrieved=scored(("b", 0.03), ("d", 0.01)),
                        reranked=scored(("b", 0.5), ("d", 0.3)), finding=FINDINGS[1], decision="REVISE",
                        web_error="Tavily down")
    third = StepRecord(2, "What did AMD launch?", "search_docs", [], None, "", finding=FINDINGS[2], decision="FINISH")
    calls = [call("plan", None), *(call(m, 0) for m in ("rewrite", "supervise", "distill", "reflect")),
             call("policy", None), call("rewrite", 1), call("distill", 1, attempts=2, degraded=True),
             call("reflect", 1), call("policy", None), call("plan", None), call("rewrite", 2), call("supervise", 2),
             call("policy", None), call("answer", None)]
    plans = [[{"sub_question": q} for q in ("Data Center revenue?", "Growth?", "Competition?")],
             [{"sub_question": "What did AMD launch?"}]]
    return Trajectory(ASKED, "llm", "none", "tavily", plans, [first, second, third], calls)


def test_features_of_every_decision_in_a_recorded_trajectory() -> None:
    points = decision_points(recorded())
    values = [feature_values(p, fake_embed) for p in points]
    assert all(list(v) == list(FEATURES) for v in values)
    assert values[0] == pytest.approx({
        "steps_done": 1, "plan_length": 3, "steps_left": 2, "plan_done": 1 / 3, "revisions": 0, "retrieved": 3,
        "retrieved_top": 0.9, "retrieved_margin": (0.9 - 0.5) / 0.9, "reranked_top": 4.0, "reranked_margin": 0.25,
        "new_passages": 1.0, "novelty": 1.0, "keyword_coverage": 0.5, "keyword_gain": 0.5,
        "entity_coverage": 0.5, "nothing_found": 0, "web_step": 0, "web_failed": 0, "degraded": 0, "lm_calls": 5,
        "kilotokens": 0.6})
    # the policy call between the steps is left out of calls and tokens; the degraded distiller counts twice
    assert values[1] == pytest.approx({
        "steps_done": 2, "plan_length": 3, "steps_left": 1, "plan_done": 2 / 3, "revisions": 0, "retrieved": 2,
        "retrieved_top": 0.03, "retrieved_margin": 1 / 3, "reranked_top": 0.5, "reranked_margin": 0.2,
        "new_passages": 0.5, "novelty": 0.4, "keyword_coverage": 1.0, "keyword_gain": 0.5,
        "entity_coverage": 1.0, "nothing_found": 0, "web_step": 1, "web_failed": 1, "degraded": 1, "lm_calls": 9,
        "kilotokens": 0.96})
    # after REVISE the new one-step plan is in force, and its step found nothing
    assert {k: values[2][k] for k in ("plan_length", "steps_left", "plan_done", "revisions", "retrieved",
                                      "reranked_top", "new_passages", "novelty", "nothing_found", "lm_calls")} \
        == pytest.approx({"plan_length": 1, "steps_left": 0, "plan_done": 1.0, "revisions": 1, "retrieved": 0,
                          "reranked_top": 0.0, "new_passages": 0.0, "novelty": 0.2, "nothing_found": 1,
                          "lm_calls": 12})


def test_a_live_decision_point_is_the_one_the_record_shows() -> None:
    whole = recorded()
    so_far = Trajectory(ASKED, "learned", "none", "tavily", whole.plans[:1], whole.steps[:2], whole.calls[:9])
    assert live_point(ASKED, so_far, steps_left=1) == decision_points(whole)[1]


def test_a_step_cut_short_by_a_budget_is_no_decision_point() -> None:
    whole = recorded()
    whole.steps[2].decision = ""
    assert len(decision_points(whole)) == 2


# --- labels ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("scores", "labels"), [
    ([0.5, 1.0, 0.0], [False, True]),  # the best stop is after step 2, though the final answer is worse
    ([1.0, 0.0], [True]),
    ([0.0, 0.0], [True]),              # going on for nothing costs a step
    ([0.0, 0.01], [True]),             # a gain below the cost of the step
    ([0.0, 0.05], [False]),
    ([0.2, 0.2, 0.9], [False, False]),  # worth going on two steps to gain 0.7
    ([0.7], []),
])
def test_stop_labels_compare_stopping_with_the_best_later_stop(scores: list[float], labels: list[bool]) -> None:
    assert stop_labels(scores, cost=0.02) == labels


def fake_embed_any(texts: list[str]) -> np.ndarray:
    return np.eye(len(texts))


def answer(short: str) -> dict[str, str]:
    return {"short_answer": short}


def test_labels_of_a_scripted_run_follow_from_the_stop_scores(policy_workspace: Path) -> None:
    gaming = "Gaming revenue was $9.07 billion."
    run = [plan("Data Center revenue?", "Gaming revenue?", "Competition?"), *step(), *step(finding=gaming),
           *step(finding="Competition is intense."), answer("41%")]
    at_decisions = [{"decision": "CONTINUE", "reason": "s"}, answer("$9.07 billion"),
                    {"decision": "REVISE", "reason": "s"}, answer("$15.01 billion")]
    lm = DummyLM(run + at_decisions, adapter=dspy.JSONAdapter())
    program = DeepResearch(Retriever(tiny_index(policy_workspace), top_k=10), policy="plan",
                           roles=RoleConfig(reflection=True))  # the scripted steps hold its findings
    example = example_of(Question("q", QUESTION, "$15.01 billion"))
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        traced = trace_question(program, example, ResearchMetric({"f1": 1.0}), fake_embed_any)
    # F1 against "$15.01 billion": "$9.07 billion" shares one of two tokens, "41%" none
    assert traced.scores == [0.5, 1.0, 0.0]
    assert traced.labels(0.02) == [False, True]
    assert [d.lm_decision for d in traced.decisions] == ["CONTINUE", "REVISE"]
    assert [d.features["steps_left"] for d in traced.decisions] == [2, 1]
    assert len(lm.history) == len(run + at_decisions)  # one policy and one answer call per decision point
    prompts = [entry["messages"][-1]["content"] for entry in lm.history]
    assert "Competition?" in prompts[14] and gaming not in prompts[14]  # the policy sees the steps left
    # the stop answers read the passages gathered so far: never more than the final answer did
    shown = [prompt.count("\n[") + prompt.startswith("Passages:\n[") for prompt in (prompts[15], prompts[17], prompts[13])]
    assert shown[0] <= shown[1] <= shown[2]


def test_a_replanned_run_labels_revise_at_the_plans_end(policy_workspace: Path) -> None:
    gaming = "Gaming revenue was $9.07 billion."
    first = [plan("Data Center revenue?"), *step(), answer("$15.01 billion")]
    at_end = [{"decision": "REVISE", "reason": "s"}]
    # the same plan and step again, then at the plan's end a re-plan: its repeated step is dropped, the new one
    # finds the Gaming figure, and the answer written after it is right
    revised = [plan("Data Center revenue?"), *step(), plan("Data Center revenue?", "Gaming revenue?"),
               *step(query="Gaming revenue", finding=gaming), answer("$9.07 billion")]
    lm = DummyLM(first + at_end + revised, adapter=dspy.JSONAdapter())
    program = DeepResearch(Retriever(tiny_index(policy_workspace), top_k=10), policy="plan",
                           roles=RoleConfig(reflection=True))
    example = example_of(Question("q", QUESTION, "$9.07 billion"))
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        traced = trace_question(program, example, ResearchMetric({"f1": 1.0}), fake_embed_any, revise=True)
    assert len(lm.history) == len(first + at_end + revised)
    assert (traced.decisions, traced.final_score, traced.points) == ([], 0.5, 1)
    assert traced.revision is not None
    assert (traced.revision.score, traced.revision.added_steps, traced.revision.lm_decision) == (1.0, 1, "REVISE")
    assert traced.revision.features["steps_left"] == 0 and traced.revision.features["revisions"] == 0
    assert traced.revise_label(0.02) and not traced.revise_label(0.6)  # re-planning pays unless a step costs more
    assert not program.policy.revise_once  # the program runs its plan as before once traced


def test_only_a_plan_following_run_can_be_labelled(policy_workspace: Path) -> None:
    with pytest.raises(ValueError, match="policy='plan'"):
        trace_question(DeepResearch(Retriever(tiny_index(policy_workspace), top_k=10)),
                       example_of(Question("q", "Q?", "A")), ResearchMetric(), fake_embed_any)


# --- the classifier as JSON -------------------------------------------------------------------------------------

def fitted() -> tuple[Any, LearnedPolicy, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, len(FEATURES))) * np.arange(1, len(FEATURES) + 1)
    finish = (x[:, 2] + 0.5 * x[:, 11] > 0).astype(int)
    model = fit_classifier(x, finish)
    return model, LearnedPolicy(list(FEATURES), classifier_of(model, 0.4), summary={"trainset": "synthetic"}), x


def decisions(x: np.ndarray, label: np.ndarray) -> Dataset:
    """REVISE decision points, one a question, that the LM never took."""
    n = len(label)
    return Dataset("REVISE", "FINISH", x, label, np.zeros(n, dtype=int), np.arange(n), {"FINISH": n})


def test_a_decision_whose_held_out_decisions_earn_no_more_than_never_taking_it_is_not_learned() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(80, len(FEATURES)))
    rare = np.zeros(80, dtype=int)
    rare[:12] = 1  # REVISE at 12 of 80 points, at random: the features say nothing of it
    # the reward: a point decided as its label says earns 1, else nothing (labels are the best decisions)
    matches = lambda data: lambda yes: float(np.mean(np.array(yes) == data.label))  # noqa: E731
    noise = decisions(x, rare)
    part = fit_part(noise, matches(noise), "")
    assert part.classifier is None and part.chosen is None and part.summary["reward_without"] == 0.85
    assert part.summary["reward"] <= 0.85 and part.summary["why"].startswith("out of fold its decisions earn")
    assert "no more than never REVISE (0.8500)" in part.summary["why"]
    taught = decisions(x, (x[:, 3] > 0.5).astype(int))  # REVISE where one feature is high: learnable
    kept = fit_part(taught, matches(taught), "")
    assert kept.classifier is not None and kept.summary["reward"] > kept.summary["reward_without"]
    assert kept.chosen is not None and kept.summary["cv_accuracy"] == kept.summary["reward"]  # here one measure


# Queries searched every way: keyword finds the evidence of a figure's query, vector that of a name's.
FIGURE_QUERY, NAME_QUERY = "Data Center revenue in fiscal 2023", "who founded the company"


def searched(query: str, keyword: float, vector: float, lm: str = "vector") -> SearchedStep:
    return SearchedStep(query, None, lm, {"vector": vector, "keyword": keyword, "hybrid": (keyword + vector) / 2})


def strategy_traces() -> list[TracedQuestion]:
    """Eight questions of three searched steps each: a figure's query, a name's that every search answers alike,
    and a name's that vector search answers best; the LM always chose vector."""
    return [TracedQuestion(f"q{n}", [], 1.0, searches=[
        searched(FIGURE_QUERY, keyword=1.0, vector=0.0), searched(NAME_QUERY, keyword=0.5, vector=0.5),
        searched(f"{NAME_QUERY} Jensen", keyword=0.0, vector=1.0)]) for n in range(8)]


def test_the_strategy_chooser_learns_which_search_finds_the_evidence_of_a_query() -> None:
    chooser, summary = cross_validated_chooser(strategy_traces())
    assert chooser is not None
    assert chooser.choose("Gaming revenue in fiscal 2022", None)[0] == "keyword"  # a figure
    chosen, why = chooser.choose("who founded NVIDIA Jensen", None)
    assert chosen == "vector" and why.startswith("learned: predicted evidence recall ")
    assert (summary["steps"], summary["questions"], summary["folds"], summary["ties"]) == (24, 8, 5, 8)
    assert summary["lm_choices"] == {"vector": 24} and summary["lm_recall"] == pytest.approx(0.5, abs=1e-4)
    # out of fold, the chooser finds what the best search per step finds; the LM's constant choice half of it
    assert summary["learned_recall"] == summary["oracle_recall"] == pytest.approx(2.5 / 3, abs=1e-4)


def test_the_strategy_chooser_needs_searched_steps_of_several_questions() -> None:
    chooser, summary = cross_validated_chooser(strategy_traces()[:3])
    assert chooser is None and "it takes 4 to cross-validate" in summary["why"]


def test_a_chooser_that_finds_less_than_the_lm_is_not_kept() -> None:
    # the LM chose the best search for every step: no rule over these features does better
    traces = [TracedQuestion(t.id, [], 1.0, searches=[replace(s, lm_strategy=max(s.recall, key=s.recall.__getitem__))
                                                     for s in t.searches]) for t in strategy_traces()]
    for t in traces[:4]:  # half the figure queries are found by vector search alone: the features cannot tell
        t.searches[0] = searched(FIGURE_QUERY, keyword=0.0, vector=1.0, lm="vector")
    chooser, summary = cross_validated_chooser(traces)
    assert chooser is None and summary["learned_recall"] < summary["lm_recall"] == summary["oracle_recall"]
    assert summary["why"].startswith("out of fold it finds less evidence")


def test_a_chooser_of_steps_that_tie_every_way_searches_hybrid() -> None:
    ties = [TracedQuestion(f"q{n}", [], 1.0, searches=[searched(NAME_QUERY, 0.5, 0.5)]) for n in range(4)]
    chooser, summary = cross_validated_chooser(ties)
    assert chooser is not None and chooser.strategies[0] == "hybrid" and summary["ties"] == 4
    assert chooser.choose("anything at all", None)[0] == "hybrid"  # the supervisor's own fallback


def test_distill_policy_learns_a_strategy_from_one_step_plans_without_decision_points() -> None:
    policy = fit_policy(strategy_traces(), 0.02, {})  # no question has a decision point, as --no-revise gives
    assert policy.finish is None and policy.revise is None and policy.strategy is not None
    assert policy.summary["replayed"] == {} and "none had a decision point" in report(policy)


class Searches:
    """A step researcher whose every search finds one passage of its own: STRATEGY.md."""

    def __init__(self) -> None:
        self.reranked: list[str] = []  # the queries read

    def search_documents(self, query: str, strategy: str, section: str | None) -> list[Passage]:
        return [Passage(f"{strategy}-1", "text", f"{strategy}.md", section or "", 1.0)]

    def rerank(self, query: str, candidates: list[Passage]) -> tuple[list[Passage], list[Passage], list[Any]]:
        self.reranked.append(query)
        return candidates, candidates, []


def test_a_traced_step_is_searched_every_way_and_read_as_the_step_reads_it() -> None:
    program = SimpleNamespace(researcher=Searches())
    step = StepRecord(0, "Revenue?", "search_docs", [], "Item 7", "", query="revenue 2023", strategy="vector")
    example = dspy.Example(gold_passages=["keyword.md"], gold_sections=[])
    searched_step = searched_every_way(program, example, step)  # type: ignore[arg-type]
    assert searched_step == SearchedStep("revenue 2023", "Item 7", "vector",
                                         {"vector": 0.0, "keyword": 1.0, "hybrid": 0.0})
    assert program.researcher.reranked == ["revenue 2023"] * 3
    web = replace(step, tool="search_web", strategy=None)
    assert searched_every_way(program, example, web) is None  # type: ignore[arg-type]
    assert searched_every_way(program, dspy.Example(gold_passages=[], gold_sections=[]), step) is None  # type: ignore[arg-type]


def test_the_classifiers_round_trip_through_json(tmp_path: Path) -> None:
    model, policy, x = fitted()
    policy.revise = classifier_of(fit_classifier(x, (x[:, 5] > 0).astype(int)), 0.7)
    policy.strategy, _ = cross_validated_chooser(strategy_traces())
    saved = policy.save(tmp_path)
    raw = json.loads(saved.read_text())
    assert raw["features"] == list(FEATURES) and raw["format"] == "dspy-rag-policy" and raw["version"] == 3
    assert set(raw["finish"]) == set(raw["revise"]) == {"means", "scales", "coefficients", "intercept", "threshold"}
    assert raw["strategy"]["features"] == list(QUERY_FEATURES)
    loaded = LearnedPolicy.load(tmp_path)
    assert loaded == policy and loaded.finish is not None
    expected = model.predict_proba(x)[:, 1]
    assert [loaded.finish.probability(row.tolist()) for row in x] == pytest.approx(expected.tolist(), abs=1e-12)
    assert loaded.describe() == ("learned policy from synthetic (finish at 0.40, revise at 0.70, strategy "
                                 f"({'/'.join(loaded.strategy.strategies)}))")


def test_a_policy_of_a_strategy_chooser_alone_loads(tmp_path: Path) -> None:
    chooser, _ = cross_validated_chooser(strategy_traces())
    LearnedPolicy(list(FEATURES), strategy=chooser).save(tmp_path)
    loaded = LearnedPolicy.load(tmp_path)
    assert loaded.strategy == chooser and loaded.finish is None and loaded.revise is None


def test_a_first_version_policy_loads_as_its_finish_classifier(tmp_path: Path) -> None:
    _, policy, x = fitted()
    assert policy.finish is not None
    (tmp_path / POLICY_FILE).write_text(json.dumps({"format": "dspy-rag-policy", "version": 1,
                                                    "features": list(FEATURES), **asdict(policy.finish)}))
    loaded = LearnedPolicy.load(tmp_path)
    assert loaded.finish == policy.finish and loaded.revise is None


def test_a_second_version_policy_without_a_strategy_chooser_loads(tmp_path: Path) -> None:
    _, policy, _ = fitted()
    raw = json.loads(policy.save(tmp_path).read_text())
    raw.pop("strategy")
    (tmp_path / POLICY_FILE).write_text(json.dumps({**raw, "version": 2}))
    loaded = LearnedPolicy.load(tmp_path)
    assert loaded.finish == policy.finish and loaded.strategy is None


@pytest.mark.parametrize(("change", "message"), [
    (lambda raw: raw.update(features=[f for f in FEATURES if f != "novelty"] + ["mood"]),
     "distilled for other features than this program computes (lacks novelty; has unknown mood)"),
    (lambda raw: raw.update(features=list(reversed(FEATURES))), "same features in another order"),
    (lambda raw: raw.update(version=99), "newer dspy-rag"),
    (lambda raw: raw.update(version=True), "corrupt (version True is no policy version)"),
    (lambda raw: raw.update(version=0), "corrupt (version 0 is no policy version)"),
    (lambda raw: raw.update(format="other"), "not a dspy-rag policy"),
    (lambda raw: raw["finish"].update(coefficients=[1.0]), "corrupt (its coefficients do not fit its features)"),
    (lambda raw: raw["finish"].update(scales=[0.0] * len(FEATURES)), "scale is not positive"),
    (lambda raw: raw.update(revise=[1, 2]), "corrupt (a classifier is not an object)"),
    (lambda raw: raw.update(finish=None, revise=None, strategy=None), "corrupt (it holds no classifier)"),
    (lambda raw: raw["strategy"].update(features=["query_words"]), "other query features than this program"),
    (lambda raw: raw["strategy"].update(strategies=["vector", "grep", "hybrid"]), "corrupt (its strategies"),
    (lambda raw: raw["strategy"].update(intercepts=[0.5]), "corrupt (its strategy coefficients do not fit"),
    (lambda raw: raw["strategy"].update(scales=[0.0] * len(QUERY_FEATURES)), "query feature scale is not positive"),
    (lambda raw: raw["strategy"].pop("means"), "corrupt (its strategy chooser is not whole)"),
    (lambda raw: raw["strategy"].update(intercepts=5), "corrupt (its strategy coefficients do not fit"),
    (lambda raw: raw["strategy"].update(strategies=[["vector"]]), "corrupt (its strategies"),
    (lambda raw: raw["strategy"].update(means=[True] * len(QUERY_FEATURES)), "strategy coefficients do not fit"),
    (lambda raw: raw["finish"].update(means=5), "corrupt (its coefficients do not fit its features)"),
])
def test_a_policy_that_does_not_fit_the_program_is_refused(tmp_path: Path, change: Any, message: str) -> None:
    _, policy, _ = fitted()
    policy.strategy, _ = cross_validated_chooser(strategy_traces())
    raw = json.loads(policy.save(tmp_path).read_text())
    change(raw)
    (tmp_path / POLICY_FILE).write_text(json.dumps(raw))
    with pytest.raises(UserError, match="run `dspy-rag distill-policy|upgrade") as caught:
        LearnedPolicy.load(tmp_path)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_or_unreadable_policy_says_to_distill_one(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="has no learned policy .* run `dspy-rag distill-policy --trainset NAME"):
        LearnedPolicy.load(tmp_path)
    (tmp_path / POLICY_FILE).write_text("{not json")
    with pytest.raises(UserError, match="corrupt"):
        LearnedPolicy.load(tmp_path)


# --- ask and distill-policy with a scripted LM ------------------------------------------------------------------

def two_step_replies(decision: str = "CONTINUE") -> dict[str, dict[str, Any]]:
    """Dict replies chosen by prompt: a two-step plan; the second step finds the Gaming passage, and an answer
    written from both passages says $9.07 billion, one written from the first alone $15.01 billion. A query
    sharing no word with its step searches the step's sub-question (the query guard), so each step reads its
    own file. Order matters: the first key a prompt contains wins."""
    return {
        "`steps`": {"steps": [{"sub_question": q, "tool": "search_docs", "keywords": [], "section": None,
                               "justification": "needed"} for q in ("What was Data Center revenue?",
                                                                     "What was Gaming revenue?")]},
        "`query`": {"query": "zzz"},
        "`strategy`": {"strategy": "hybrid", "reason": "figures"},
        "`context`": {"context": "Revenue figures [1].", "used_passages": [1]},
        "`decision`": {"decision": decision, "reason": "scripted"},
        "What was Gaming revenue?": {"finding": "Gaming revenue was $9.07 billion."},
        "`finding`": {"finding": "Data Center revenue was $15.01 billion."},
        "\n\n[2] gaming.md": answer("$9.07 billion"),
        "Question:\n": answer("$15.01 billion"),
    }


@pytest.fixture()
def policy_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A trainset whose stop-after-one-step answer is right for q1, q3 and the full one for q2, q4; an artifact
    of the uncompiled program; a configuration naming both; every LM a scripted one."""
    data_center, gaming = FACTS.split("\n\n")
    (tmp_path / "facts.md").write_text(data_center)
    (tmp_path / "gaming.md").write_text(gaming)
    golds = ["$15.01 billion", "$9.07 billion", "15.01 billion", "9.07 billion", "$15.01 billion"]
    rows = [{"id": f"q{n}", "question": f"Question {n}: what was the Data Center revenue?", "answer": gold,
             "split": "dev" if n == 5 else "train"} for n, gold in enumerate(golds, start=1)]
    (tmp_path / "qs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "tiny.yaml").write_text("name: tiny\ndescription: two facts\nquestions: qs.jsonl\n"
                                        "documents: [facts.md, gaming.md]\nsplit: {field: split}\n")
    settings = config_of(tmp_path)
    program = build_program("deep", settings, Index(settings), None)
    artifacts.save(settings.artifacts.path / "tiny-art", program, artifacts.Manifest(
        name="tiny-art", program="DeepResearch", predictors=artifacts.program_signature(program),
        model="local/qwen2.5-coder-0.5b", optimizer="labeled", trainset="tiny", trainset_hash="x",
        metric="weighted", weights=dict(DEFAULT_WEIGHTS), dev_questions=1, dev_before=None, dev_after=None), [])
    (tmp_path / "dspy-rag.yaml").write_text(f"artifacts: {{path: {settings.artifacts.path}}}\n"
                                            f"index: {{path: {tiny_index(tmp_path).root}}}\n"
                                            "retrieval: {reranker: none, top_n: 1}\n"
                                            "roles: {reflection: true}\n")  # the scripted steps hold its findings
    monkeypatch.setattr(models, "build_lm", lambda _config: DummyLM(two_step_replies(), adapter=dspy.JSONAdapter()))
    return tmp_path


def config_of(root: Path) -> Config:
    return scratch_config(root, **{"artifacts.path": root / "artifacts", "retrieval.reranker": "none"})


def tiny_index(root: Path) -> Index:
    """The two facts, ingested once into the trainset's scratch index."""
    return load_trainset(str(root / "tiny.yaml")).index(config_of(root))


def constant(intercept: float) -> Classifier:
    """A classifier whose probability is the logistic of `intercept`, whatever the features."""
    n = len(FEATURES)
    return Classifier([0.0] * n, [1.0] * n, [0.0] * n, intercept=intercept, threshold=0.5)


def always_finish() -> LearnedPolicy:
    return LearnedPolicy(list(FEATURES), constant(3.0))


def ask_json(*options: str) -> dict[str, Any]:
    result = invoke("ask", "--json", "--artifact", "tiny-art", *options, "What was the revenue?")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["trajectory"]


def test_ask_with_the_learned_policy_makes_no_policy_call(policy_workspace: Path) -> None:
    always_finish().save(policy_workspace / "artifacts" / "tiny-art")
    trajectory = ask_json("--policy", "learned")
    assert [c["module"] for c in trajectory["calls"]] == ["plan", "rewrite", "supervise", "reflect", "answer"]
    decided = trajectory["steps"][0]
    assert len(trajectory["steps"]) == 1 and decided["decision"] == "FINISH"
    assert decided["finish_probability"] == pytest.approx(1 / (1 + np.exp(-3.0)), abs=1e-4)
    assert decided["decision_reason"].startswith("learned: p(finish) 0.95")
    # the LM policy, by contrast, is asked after every step
    assert [c["module"] for c in ask_json("--policy", "llm")["calls"]].count("policy") == 2


def test_ask_decides_by_the_artifacts_learned_policy_unless_told_otherwise(policy_workspace: Path) -> None:
    unlearned = ask_json()  # an artifact without a policy.json: the LM policy decides
    assert unlearned["policy"] == "llm" and "policy" in [c["module"] for c in unlearned["calls"]]
    always_finish().save(policy_workspace / "artifacts" / "tiny-art")
    learned = ask_json()
    assert learned["policy"] == "learned" and "policy" not in [c["module"] for c in learned["calls"]]
    assert learned["steps"][0]["decision_reason"].startswith("learned: p(finish)")
    assert ask_json("--policy", "llm")["policy"] == "llm"


def test_auto_is_the_learned_policy_only_where_the_artifact_carries_one(tmp_path: Path) -> None:
    assert policy_of("auto", None) == "llm"  # the uncompiled program
    assert policy_of("auto", tmp_path) == "llm"
    (tmp_path / POLICY_FILE).write_text("{}")
    assert policy_of("auto", tmp_path) == "learned"
    assert [policy_of(choice, tmp_path) for choice in ("llm", "plan", "learned")] == ["llm", "plan", "learned"]


def test_every_surface_offers_the_same_policy_choices() -> None:
    from dspy_rag.cli.options import Policy
    from dspy_rag.server.bodies import PolicyName

    (literal, _field) = get_args(PolicyName)
    assert set(get_args(Policy)) == set(get_args(literal)) == set(get_args(PolicyChoice))


def test_a_broken_policy_under_auto_says_how_to_ask_without_it(policy_workspace: Path) -> None:
    (policy_workspace / "artifacts" / "tiny-art" / POLICY_FILE).write_text("{not json")
    assert_one_line_error(invoke("ask", "--artifact", "tiny-art", "Revenue?"), "corrupt", "--policy llm")
    assert "supervise" in [c["module"] for c in ask_json("--policy", "llm")["calls"]]


def test_keep_going_stands_over_the_learned_policy(policy_workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    replies = two_step_replies()
    replies["`steps`"] = {"steps": [{"sub_question": q, "tool": "search_docs", "keywords": [], "section": None,
                                     "justification": "needed"}
                                    for q in ("What was Data Center revenue?",
                                              "What was Gaming revenue beside the answer of step 1?")]}
    monkeypatch.setattr(models, "build_lm", lambda _config: DummyLM(replies, adapter=dspy.JSONAdapter()))
    always_finish().save(policy_workspace / "artifacts" / "tiny-art")
    chain = ask_json("--policy", "learned")
    assert [s["decision"] for s in chain["steps"]] == ["CONTINUE", "FINISH"]
    assert chain["steps"][0]["decision_reason"] == "keep_going: a remaining step builds on an earlier answer"
    assert [g["guard"] for g in chain["guards"]].count("keep_going") == 1  # beside the scripted queries' query_guard
    (policy_workspace / "dspy-rag.yaml").write_text((policy_workspace / "dspy-rag.yaml").read_text()
                                                    + "guards: {keep_going: false}\n")
    assert [s["decision"] for s in ask_json("--policy", "learned")["steps"]] == ["FINISH"]  # the classifier's


def test_ask_with_a_learned_strategy_chooser_asks_no_supervisor(policy_workspace: Path) -> None:
    n = len(QUERY_FEATURES)
    chooser = StrategyChooser(["keyword", "vector", "hybrid"], list(QUERY_FEATURES), [0.0] * n, [1.0] * n,
                              [[0.0] * n] * 3, [0.9, 0.5, 0.1])
    LearnedPolicy(list(FEATURES), constant(3.0), strategy=chooser).save(policy_workspace / "artifacts" / "tiny-art")
    trajectory = ask_json("--policy", "learned")
    assert [c["module"] for c in trajectory["calls"]] == ["plan", "rewrite", "reflect", "answer"]
    (researched,) = trajectory["steps"]
    assert researched["strategy"] == "keyword"  # the scripted supervisor LM would have said hybrid
    assert researched["strategy_reason"] == "learned: predicted evidence recall keyword 0.90, vector 0.50, hybrid 0.10"
    # under the LM policy the supervisor LM chooses, whatever the artifact's policy holds
    assert "supervise" in [c["module"] for c in ask_json("--policy", "llm")["calls"]]


def with_gold_evidence(workspace: Path) -> None:
    """The tiny set's questions with their gold evidence: the Data Center questions' is facts.md, the others'
    gaming.md (each step's search is then scored, and a strategy chooser learned)."""
    rows = [json.loads(line) for line in (workspace / "qs.jsonl").read_text().splitlines()]
    source = {Path(s).name: s for s in tiny_index(workspace).sources}
    for row in rows:
        row["gold_passages"] = [source["facts.md" if "15.01" in row["answer"] else "gaming.md"]]
    (workspace / "qs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_distill_policy_learns_the_strategy_from_steps_searched_every_way(policy_workspace: Path) -> None:
    with_gold_evidence(policy_workspace)
    result = invoke("distill-policy", "--trainset", str(policy_workspace / "tiny.yaml"), "--artifact", "tiny-art",
                    "--no-revise", "--json")
    assert result.returncode == 0, result.stderr
    policy = LearnedPolicy.load(policy_workspace / "artifacts" / "tiny-art")
    strategy = policy.summary["strategy"]
    assert (strategy["steps"], strategy["questions"]) == (8, 4)  # two documents steps a question
    assert strategy["lm_choices"] == {"hybrid": 8}  # the scripted supervisor's
    # each step reads one passage: the first step finds facts.md, the second gaming.md, whichever the search
    assert strategy["mean_recall"] == {name: 0.5 for name in STRATEGIES} and strategy["ties"] == 8
    assert policy.strategy is not None and sorted(policy.strategy.strategies) == sorted(STRATEGIES)
    assert "strategy: 8 searched steps of 4 questions (8 tied every way)" in result.stderr
    # distilled again: the traces, their searched steps included, come back from the run store
    again = invoke("distill-policy", "--trainset", str(policy_workspace / "tiny.yaml"), "--artifact", "tiny-art",
                   "--no-revise")
    assert again.returncode == 0, again.stderr
    assert "traced runs: 0 run, 4 reused from the run store" in again.stderr
    redone = LearnedPolicy.load(policy_workspace / "artifacts" / "tiny-art")
    assert redone.summary["strategy"] == strategy and redone.strategy == policy.strategy


def test_ask_with_the_learned_policy_needs_a_distilled_one(policy_workspace: Path) -> None:
    assert_one_line_error(invoke("ask", "--artifact", "tiny-art", "--policy", "learned", "Revenue?"),
                          "artifact tiny-art has no learned policy", "distill-policy")
    assert_one_line_error(invoke("ask", "--artifact", "none", "--policy", "learned", "Revenue?"),
                          "--policy learned", "--artifact NAME")


def test_distill_policy_labels_fits_and_saves_into_the_artifact(policy_workspace: Path) -> None:
    with_gold_evidence(policy_workspace)
    result = invoke("distill-policy", "--trainset", str(policy_workspace / "tiny.yaml"), "--artifact", "tiny-art",
                    "--json")
    assert result.returncode == 0, result.stderr
    assert "q2: 2 decision point(s), scores" in result.stderr  # a log gets a line per question
    # the re-plan repeats the plan: its first step is dropped, its last searched again, to the same answer
    assert "q2: 2 decision point(s), scores 0.50, 1.00, re-planned 1.00 (+1 steps)" in result.stderr
    assert "8 decision points from 4 of 4 questions; FINISH: not learned" in result.stderr
    assert f"saved {policy_workspace / 'artifacts' / 'tiny-art' / POLICY_FILE}" in result.stderr
    policy = LearnedPolicy.load(policy_workspace / "artifacts" / "tiny-art")
    assert json.loads(result.stdout) == asdict(policy)  # --json: the saved policy, alone on stdout
    summary = policy.summary
    assert (summary["questions"], summary["decision_points"]) == (4, 8)
    finish = summary["finish"]
    assert (finish["decision_points"], finish["folds"]) == (4, 2)
    assert finish["labels"] == {"FINISH": 2, "CONTINUE": 2}  # q1 and q3 are answered after the first step
    assert finish["lm_decisions"] == {"CONTINUE": 4} and finish["lm_label_accuracy"] == 0.5
    # the four questions' runs are alike step for step, but q1 and q3 stop after the first: no classifier can tell
    # them apart, so none is kept, and the policy goes on while the plan has steps, as the plan policy does
    assert finish["reward"] <= finish["reward_without"] and policy.finish is None
    assert "FINISH: not learned (out of fold its decisions earn" in result.stderr
    assert policy.strategy is not None  # what it learns and saves
    # re-planning found nothing new, so REVISE never paid and cannot be learned: the policy finishes at the end
    assert policy.revise is None and summary["revise"]["labels"] == {"REVISE": 0, "FINISH": 4}
    assert "REVISE: not learned (the labels need both REVISE and FINISH" in result.stderr
    replayed = summary["replayed"]
    assert replayed["oracle"]["score"] > replayed["plan"]["score"] == replayed["llm"]["score"]
    assert (replayed["plan"]["steps"], replayed["llm"]["steps"], replayed["oracle"]["steps"]) == (2, 2, 1.5)
    assert summary["artifact"] == "tiny-art" and summary["lm_calls"] > 0
    assert summary["step_cost"] == 0.02 and summary["trainset"] == "tiny"
    assert "traced runs: 4 run, 0 reused" in result.stderr and summary["reused"] == 0
    # distilled again (say with another step cost): the traces come from the run store, no LM call is made
    again = invoke("distill-policy", "--trainset", str(policy_workspace / "tiny.yaml"), "--artifact", "tiny-art",
                   "--step-cost", "0.05")
    assert again.returncode == 0, again.stderr
    assert "traced runs: 0 run, 4 reused from the run store" in again.stderr
    redone = LearnedPolicy.load(policy_workspace / "artifacts" / "tiny-art").summary
    assert redone["lm_calls"] == 0 and redone["reused"] == 4 and redone["finish"]["labels"] == finish["labels"]
    # without the re-planned runs the traces are others: run anew, and only the plan's steps are decision points
    plain = invoke("distill-policy", "--trainset", str(policy_workspace / "tiny.yaml"), "--artifact", "tiny-art",
                   "--no-revise")
    assert plain.returncode == 0, plain.stderr
    assert "traced runs: 4 run, 0 reused" in plain.stderr and "4 decision points from 4 of 4 questions" in plain.stderr
    assert "REVISE: not learned (no traced run was re-planned at its plan's end (traced with --no-revise" in plain.stderr


def test_ask_with_a_learned_revise_replans_once_at_the_plans_end(policy_workspace: Path) -> None:
    LearnedPolicy(list(FEATURES), revise=constant(3.0)).save(policy_workspace / "artifacts" / "tiny-art")
    trajectory = ask_json("--policy", "learned")
    modules = [c["module"] for c in trajectory["calls"]]
    # no finish classifier: the plan's two steps; then REVISE, once: the re-plan repeats both steps, and its last
    # is searched again; after it the research finishes, whatever the classifier says
    assert modules.count("plan") == 2 and "policy" not in modules and len(trajectory["plans"]) == 2
    first, second, third = trajectory["steps"]
    assert first["decision"] == "CONTINUE" and first["finish_probability"] is None
    assert second["decision"] == "REVISE" and second["revise_probability"] == pytest.approx(0.9526, abs=1e-4)
    assert second["decision_reason"] == "learned: plan done, p(revise) 0.95, threshold 0.50"
    assert third["decision"] == "FINISH" and third["revise_probability"] is None


def test_distill_policy_traces_several_trainsets_in_turn_up_to_a_number_of_decisions(policy_workspace: Path) -> None:
    with_gold_evidence(policy_workspace)
    tiny = (policy_workspace / "tiny.yaml").read_text()
    (policy_workspace / "other.yaml").write_text(tiny.replace("name: tiny", "name: other"))
    sets = [str(policy_workspace / name) for name in ("tiny.yaml", "other.yaml")]
    result = invoke("distill-policy", "--trainset", ",".join(sets), "--artifact", "tiny-art", "--decisions", "8",
                    "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)["summary"]
    # two decision points a question (after its first step, and at its plan's end), the sets in turn: q1 and q2
    # of each, then the target is met
    assert summary["per_set"] == {"tiny": {"questions": 2, "decision_points": 4},
                                  "other": {"questions": 2, "decision_points": 4}}
    assert summary["trainset"] == "tiny+other" and [s["name"] for s in summary["trainsets"]] == ["tiny", "other"]
    assert summary["finish"]["labels"] == {"FINISH": 2, "CONTINUE": 2} and summary["decision_target"] == 8
    assert ("8 decision points from 4 of 4 questions [tiny: 2 questions, 4 points, other: 2 questions, 4 points]"
            in result.stderr)
    # a target the train questions cannot meet: every question is traced (from the run store where it can be)
    short = invoke("distill-policy", "--trainset", sets[0], "--artifact", "tiny-art", "--decisions", "50")
    assert short.returncode == 0, short.stderr
    assert "8 decision points (short of the 50 asked for: the train questions ran out)" in short.stderr
    assert "2 reused from the run store" in short.stderr


def test_distill_policy_refuses_what_it_cannot_learn_from(policy_workspace: Path) -> None:
    trainset = str(policy_workspace / "tiny.yaml")
    assert_one_line_error(invoke("distill-policy", "--trainset", trainset, "--artifact", "none"),
                          "pass --artifact NAME")
    assert_one_line_error(invoke("distill-policy", "--trainset", trainset, "--artifact", "tiny-art",
                                 "--train-limit", "2"), "at least two questions each", "FINISH 1, CONTINUE 1")
    assert not (policy_workspace / "artifacts" / "tiny-art" / POLICY_FILE).exists()


def test_eval_sets_the_policies_side_by_side(policy_workspace: Path) -> None:
    always_finish().save(policy_workspace / "artifacts" / "tiny-art")
    result = invoke("eval", "--questions", str(policy_workspace / "tiny.yaml"), "--artifact", "tiny-art",
                    "--policy", "llm", "--policy", "learned", "--out", str(policy_workspace / "out"))
    assert result.returncode == 0, result.stderr
    columns = json.loads((policy_workspace / "out" / "results.json").read_text())["columns"]
    llm, learned = columns["deep+tiny-art@qwen2.5-coder-0.5b"], columns["deep+tiny-art/learned@qwen2.5-coder-0.5b"]
    assert (llm["mean_steps"], llm["median_lm_calls"], llm["mean_lm_calls"]) == (2, 10, 10)  # a policy call a step
    assert (learned["mean_steps"], learned["median_lm_calls"], learned["mean_lm_calls"]) == (1, 5, 5)
    assert [e.artifact for e in read(policy_workspace / "artifacts" / "ledger.jsonl")] == ["tiny-art"]  # prompts only
    assert_one_line_error(invoke("eval", "--questions", str(policy_workspace / "tiny.yaml"), "--policy", "oracle"),
                          "unknown policy ['oracle']; choose llm, plan, learned")
