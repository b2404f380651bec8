"""Compile's metric: one run of the program scored against a gold example with the shared metrics.

The score is a weighted mean of answer F1, evidence recall and citation validity. DSPy calls a metric in
three shapes: (example, prediction) to evaluate, (example, prediction, trace) while bootstrapping demos,
where it must say pass or fail, and GEPA's five-argument form, which also wants written feedback.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dspy

from dspy_rag.citations import check_citations, citation_validity, number_passages
from dspy_rag.errors import UserError
from dspy_rag.evals.metrics import AnswerScores, evidence_recall, score_answer, section_recall, weighted_score
from dspy_rag.retrieval import Passage
from dspy_rag.signatures import Step
from dspy_rag.trainsets.formats import Question, Support

DEFAULT_WEIGHTS: dict[str, float] = {"f1": 0.6, "evidence_recall": 0.2, "citation_validity": 0.2}
DEFAULT_THRESHOLD = 0.5  # a bootstrapped demo must come from a run at least this good


def example_of(question: Question) -> dspy.Example:
    """The gold answer is the short answer. A gold plan, where the dataset has one, becomes the planner's labeled
    demo; the gold supporting paragraphs with the short answer, the short answer's."""
    gold_plan = {"steps": [Step(**{"justification": f"part {n} of the question", **step})
                           for n, step in enumerate(question.plan, start=1)]} if question.plan else {}
    return dspy.Example(id=question.id, question=question.question, short_answer=question.answer,
                        aliases=list(question.aliases), gold_passages=list(question.gold_passages),
                        gold_sections=list(question.gold_sections), **gold_plan,
                        **shown_with_support(question.support)).with_inputs("question")


def shown_with_support(support: Sequence[Support]) -> dict[str, Any]:
    """The passages that state the answer, numbered as the short answer's prompt shows them: with the gold short
    answer they label its demos."""
    return {"passages": number_passages(gold_evidence(support))} if support else {}


def gold_evidence(support: Sequence[Support]) -> list[Passage]:
    """The supporting paragraphs as retrieval returns them from a trainset's scratch index."""
    return [Passage(s.passage.id, s.passage.indexed_text, s.passage.id, s.passage.title, 0.0) for s in support]


def looked_at(prediction: dspy.Prediction) -> list[Passage]:
    """Every passage the program read after reranking: the deep program's floor and steps, the baseline's context."""
    trajectory = getattr(prediction, "trajectory", None)
    if trajectory is None:
        return list(prediction.passages)
    read = [*trajectory.floor, *(s for step in trajectory.steps for s in step.reranked)]
    return [Passage(s.id, "", s.source, s.section, s.score) for s in read]


def evidence_found(example: dspy.Example, passages: Sequence[Passage]) -> float | None:
    """The share of the example's gold evidence the passages hold: its gold passages by source, else its gold
    sections; None when it has neither."""
    if example.gold_passages:
        return evidence_recall([p.source for p in passages], example.gold_passages)
    return section_recall([p.section for p in passages], example.gold_sections)


def scores_of(example: dspy.Example, prediction: dspy.Prediction) -> AnswerScores:
    """Answer scores (of the short answer; the cited one when there is none), evidence recall (gold passages,
    else gold sections) and citation validity of one run."""
    scores = score_answer(prediction.short_answer or prediction.answer, example.short_answer, example.aliases)
    validity = citation_validity(check_citations(prediction.draft, prediction.passages))
    return AnswerScores(scores.em, scores.f1, scores.contains, evidence_found(example, looked_at(prediction)),
                        validity)


def describe(weights: Mapping[str, float]) -> str:
    return "weighted(" + ",".join(f"{name}={w:g}" for name, w in weights.items()) + ")"


def metric_weights(weights: Mapping[str, Any]) -> dict[str, float]:
    """Weights as `--weight` gives them, checked: known components, numbers, non-negative, one positive."""
    if bad := [f"{name}={value}" for name, value in weights.items()
               if not isinstance(value, int | float) or isinstance(value, bool)]:
        raise UserError(f"--weight takes a number for each component, got {', '.join(bad)}; e.g. --weight f1=0.6")
    try:
        weighted_score(AnswerScores(0, 0, 0, 0, 0), weights)
    except ValueError as exc:
        raise UserError(f"--weight: {exc}; e.g. --weight f1=0.6") from exc
    return {name: float(value) for name, value in weights.items()}


class ResearchMetric:
    """The weighted score of a run; every scored run is also reported to `on_score` (progress, trajectories)."""

    def __init__(self, weights: Mapping[str, float] | None = None, threshold: float = DEFAULT_THRESHOLD,
                 on_score: Callable[[dspy.Example, dspy.Prediction | None, float], None] = lambda *_: None) -> None:
        self.weights = dict(weights or DEFAULT_WEIGHTS)
        weighted_score(AnswerScores(0, 0, 0, 0, 0), self.weights)  # unknown names or bad weights fail here, early
        self.threshold = threshold
        self.on_score = on_score

    @property
    def name(self) -> str:
        return describe(self.weights)

    def score(self, example: dspy.Example, prediction: dspy.Prediction) -> float:
        value = weighted_score(scores_of(example, prediction), self.weights)
        self.on_score(example, prediction, value)
        return value

    def __call__(self, example: dspy.Example, prediction: dspy.Prediction, trace: Any = None,
                 pred_name: str | None = None, pred_trace: Any = None) -> float | bool | dspy.Prediction:
        value = self.score(example, prediction)
        if pred_name is not None:  # GEPA reflects on written feedback, not only on the number
            return dspy.Prediction(score=value, feedback=self.feedback(example, prediction, value))
        return value >= self.threshold if trace is not None else value

    def feedback(self, example: dspy.Example, prediction: dspy.Prediction, value: float) -> str:
        scores = scores_of(example, prediction)
        parts = [f"score {value:.2f}", f"short answer F1 {scores.f1:.2f} against the gold answer '{example.short_answer}'"]
        if scores.evidence_recall is not None:
            parts.append(f"evidence recall {scores.evidence_recall:.2f}")
        if scores.citation_validity is not None:
            parts.append(f"{scores.citation_validity:.0%} of citations point at a passage that states the sentence")
        return "; ".join(parts) + "."
