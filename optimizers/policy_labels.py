"""Labels for the stopping policy from traced runs: at every decision point, would stopping there have
scored as well as going on?

A question is run with the plan policy, so that every step of the plan is researched and each decision
point has a continuation to compare with. At each decision point (every step but the last) the answer is
answered again from the evidence gathered so far (one short-answer call) and scored with the
metric, and the policy LM is asked what it would have decided there (one policy call), to compare with.
The last step's score is the final answer's. With a cost per step, stopping after step i is worth
score[i] - cost * (i + 1), and the label is the optimal-stopping one: FINISH when stopping now is worth at
least as much as the best later stop.

Each documents step of the traced run is also searched again every way (no LM call): the evidence recall each
search strategy's reranked passages give its query is what the strategy chooser learns to predict.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import dspy

from dspy_rag.evals.research_metric import ResearchMetric, evidence_found
from dspy_rag.pipelines.conflict_note import document_kinds
from dspy_rag.pipelines.deep import DeepResearch
from dspy_rag.pipelines.lm_calls import LMCalls
from dspy_rag.pipelines.policy_features import DecisionPoint, Embed, decision_points, feature_values
from dspy_rag.pipelines.research_run import ResearchRun
from dspy_rag.pipelines.strategy_chooser import STRATEGIES
from dspy_rag.pipelines.trajectory import StepRecord


@dataclass
class Decision:
    """One decision point of a traced question."""

    features: dict[str, float]
    lm_decision: str  # what the policy LM would have decided here
    stop_score: float  # the metric's score of the answer had the research stopped here


@dataclass
class Revision:
    """The plan's end, where the research could re-plan once instead of answering, and what re-planning gave."""

    features: dict[str, float]
    lm_decision: str  # what the policy LM would have decided here
    score: float  # the metric's score of the answer after the re-planned research
    added_steps: int  # research steps the re-planned run made beyond the first plan's


@dataclass
class SearchedStep:
    """A traced documents step's query searched every way: the evidence recall each strategy's passages give."""

    query: str
    section: str | None
    lm_strategy: str  # the strategy the supervisor LM chose for it
    recall: dict[str, float]  # by strategy


@dataclass
class TracedQuestion:
    id: str
    decisions: list[Decision]
    final_score: float  # the answer after the whole plan
    revision: Revision | None = None  # traced with `revise` and the first plan researched to its end
    searches: list[SearchedStep] = field(default_factory=list)  # its documents steps, where it has gold evidence

    @property
    def scores(self) -> list[float]:
        """The score had the research stopped after each step; the last is the final answer's."""
        return [d.stop_score for d in self.decisions] + [self.final_score]

    @property
    def points(self) -> int:
        """Its decision points with a label: every step's but the last, and the plan's end when re-planned."""
        return len(self.decisions) + (self.revision is not None)

    def labels(self, cost: float) -> list[bool]:
        return stop_labels(self.scores, cost)

    def revise_label(self, cost: float) -> bool:
        """Re-planning paid: its answer scores above the first answer by more than its added steps cost."""
        return self.revision is not None and self.revision.score - cost * self.revision.added_steps > self.final_score


def stop_labels(scores: list[float], cost: float) -> list[bool]:
    """Whether stopping after step i (scores[i]) is worth at least the best later stop, each step costing `cost`;
    one label per step but the last, where the research stops anyway."""
    labels: list[bool] = []
    going_on = float("-inf")  # the worth, seen from step i, of the best stop after it
    for i in reversed(range(len(scores) - 1)):
        going_on = max(scores[i + 1], going_on) - cost
        labels.append(scores[i] >= going_on)
    return labels[::-1]


def trace_question(program: DeepResearch, example: dspy.Example, metric: ResearchMetric, embed: Embed,
                   revise: bool = False) -> TracedQuestion:
    """Run one question to the end of its plan and take every decision point apart; with `revise`, run it again
    re-planning once at the plan's end."""
    if program.policy.mode != "plan":
        raise ValueError("labels need the whole plan researched: build the program with policy='plan'")
    prediction = program(question=example.question)
    points = decision_points(prediction.trajectory)
    traced = TracedQuestion(example.id, [decision_at(program, example, metric, prediction, p, embed)
                                         for p in points[:-1]],  # the last step has no continuation to compare with
                            metric.score(example, prediction),
                            searches=[searched for step in prediction.trajectory.steps
                                      if (searched := searched_every_way(program, example, step)) is not None])
    end = points[-1] if points else None
    if revise and end is not None and not end.steps_left and not end.revisions and len(end.steps) == len(
            prediction.trajectory.steps):
        traced.revision = revision_at(program, example, metric, end, embed)
    return traced


def searched_every_way(program: DeepResearch, example: dspy.Example, step: StepRecord) -> SearchedStep | None:
    """The step's query searched by each strategy and read as the step read it; None for a step that searched the
    web, or a question without gold evidence."""
    if step.strategy is None or not (example.get("gold_passages") or example.get("gold_sections")):
        return None
    researcher = program.researcher
    recall: dict[str, float] = {}
    for strategy in STRATEGIES:
        _, top, _ = researcher.rerank(step.query, researcher.search_documents(step.query, strategy, step.section))
        recall[strategy] = evidence_found(example, top) or 0.0
    return SearchedStep(step.query, step.section, step.strategy, recall)


@contextmanager
def revising_once(program: DeepResearch) -> Iterator[DeepResearch]:
    program.policy.revise_once = True
    try:
        yield program
    finally:
        program.policy.revise_once = False


def revision_at(program: DeepResearch, example: dspy.Example, metric: ResearchMetric, end: DecisionPoint,
                embed: Embed) -> Revision:
    """The plan's end: its features, the policy LM's decision there, and the re-planned run's score."""
    findings = [s.finding for s in end.steps]
    lm_decision, _ = program.policy.ask(example.question, [], findings, LMCalls(program.budgets, []))
    with revising_once(program):
        revised = program(question=example.question)
    return Revision(feature_values(end, embed), lm_decision, metric.score(example, revised),
                    len(revised.trajectory.steps) - len(end.steps))


def decision_at(program: DeepResearch, example: dspy.Example, metric: ResearchMetric, prediction: dspy.Prediction,
                point: DecisionPoint, embed: Embed) -> Decision:
    """The features, the policy LM's decision and the stop-here score of one decision point."""
    trajectory = prediction.trajectory
    findings = [s.finding for s in point.steps]
    remaining = [s["sub_question"] for s in trajectory.plans[point.revisions][-point.steps_left:]]
    calls = LMCalls(program.budgets, [])
    lm_decision, _ = program.policy.ask(example.question, remaining, findings, calls)
    read = {s.id for s in trajectory.floor} | {s.id for step in point.steps for s in step.reranked}
    # What the answer would have been written from had the research stopped here: the floor and the passages of
    # the steps so far, as far as the final evidence holds them.
    evidence = [p for p in prediction.passages if p.id in read]
    stopped = replace(trajectory, steps=list(point.steps), calls=calls.records)
    answer = program.synthesizer(question=example.question, findings=findings, evidence=evidence,
                                 run=ResearchRun(stopped, calls, lambda _kind, _text: None),
                                 kinds=document_kinds(program.retriever.index))
    return Decision(feature_values(point, embed), lm_decision, metric.score(example, answer))
