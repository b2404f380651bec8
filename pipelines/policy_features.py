"""The state the stopping policy decides on: features of the research so far, computed without the LM.

A decision point is the research as it stood when the policy was asked, after a step and before the next
one. It is built either live (the program deciding now) or from a recorded trajectory (every decision it
made), and both give the same features, so a classifier fit on traced runs sees at run time what it saw
when it learned. Counts of LM calls and tokens leave the policy's own calls out: they differ between
policies, and the features must not.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dspy_rag.pipelines.trajectory import CallRecord, Scored, StepRecord, Trajectory
from dspy_rag.tokenizer import tokenize

Embed = Callable[[list[str]], np.ndarray]  # texts -> unit vectors, one row each

FEATURES: tuple[str, ...] = (
    "steps_done",        # research steps done, the last one just finished
    "plan_length",       # steps in the plan in force
    "steps_left",        # steps of that plan not yet done
    "plan_done",         # share of that plan done
    "revisions",         # re-plans so far
    "retrieved",         # passages the last step recalled
    "retrieved_top",     # the last step's best recall score
    "retrieved_margin",  # how far its best recall score stands above its mean, relative to the best
    "reranked_top",      # the same after reranking (the passages the step read)
    "reranked_margin",
    "new_passages",      # share of the passages the last step read that no earlier step read
    "novelty",           # 1 - the highest cosine similarity of the last finding to an earlier one
    "keyword_coverage",  # share of the question's keywords (BM25 tokens) the findings mention
    "keyword_gain",      # the coverage the last finding added
    "entity_coverage",   # share of the question's names and figures the findings mention
    "nothing_found",     # the last step read no passage
    "web_step",          # the last step searched the web
    "web_failed",        # and the web search failed
    "degraded",          # research LM calls so far whose output never parsed
    "lm_calls",          # research LM calls so far (retries included)
    "kilotokens",        # thousands of research tokens so far
)
POLICY_MODULE = "policy"
_EDGES = "$.,;:!?\"'()[]{}"


@dataclass(frozen=True)
class DecisionPoint:
    """The research when the policy is asked: the steps done, the LM calls made, the plan in force."""

    question: str
    steps: list[StepRecord]
    calls: list[CallRecord]
    plan_length: int
    steps_left: int
    revisions: int


def live_point(question: str, record: Trajectory, steps_left: int) -> DecisionPoint:
    """The decision point of a run in progress, right after its last step."""
    return DecisionPoint(question, list(record.steps), list(record.calls), len(record.plans[-1]), steps_left,
                         len(record.plans) - 1)


def decision_points(trajectory: Trajectory) -> list[DecisionPoint]:
    """Every decision a recorded run made, as the policy saw it then (a step cut short by a budget has none)."""
    points: list[DecisionPoint] = []
    plan, made_after = 0, -1  # the plan in force, and the step after which it was made
    for i, step in enumerate(trajectory.steps):
        if not step.decision:
            break
        # A step's research calls carry its index; the policy call after them does not.
        cut = 1 + max((k for k, call in enumerate(trajectory.calls) if call.step == i), default=-1)
        length = len(trajectory.plans[plan])
        points.append(DecisionPoint(trajectory.question, trajectory.steps[: i + 1], trajectory.calls[:cut], length,
                                    length - (i - made_after), plan))
        if step.decision == "REVISE" and plan + 1 < len(trajectory.plans):
            plan, made_after = plan + 1, i
    return points


def top(scored: Sequence[Scored]) -> float:
    return max((s.score for s in scored), default=0.0)


def margin(scored: Sequence[Scored]) -> float:
    """(best - mean) / |best|: scale-free, since vector, BM25, fused and reranker scores have other ranges."""
    best = top(scored)
    if len(scored) < 2 or best == 0:
        return 0.0
    return (best - sum(s.score for s in scored) / len(scored)) / abs(best)


def new_share(last: StepRecord, earlier: Sequence[StepRecord]) -> float:
    seen = {s.id for step in earlier for s in step.reranked}
    return sum(s.id not in seen for s in last.reranked) / len(last.reranked) if last.reranked else 0.0


def novelty(findings: list[str], embed: Embed) -> float:
    if len(findings) < 2:
        return 1.0
    vectors = embed(findings)
    return float(1.0 - np.max(vectors[:-1] @ vectors[-1]))


def coverage(wanted: set[str], found: set[str]) -> float:
    """Share of `wanted` in `found`; nothing wanted is nothing missing."""
    return len(wanted & found) / len(wanted) if wanted else 1.0


def words(text: str) -> list[str]:
    """Words without surrounding punctuation, currency signs or a possessive 's, as they were written."""
    stripped = (w.strip(_EDGES) for w in text.replace("\u2019", "'").split())
    return [w.removesuffix("'s").removesuffix("'S") for w in stripped if w]


def is_figure(word: str) -> bool:
    """A word with a digit in it: a figure, a year, a code."""
    return any(c.isdigit() for c in word)


def is_name(position: int, word: str) -> bool:
    """A capitalised word after a text's first (which is capitalised anyway)."""
    return position > 0 and word[0].isupper()


def entities(question: str) -> set[str]:
    """The question's names and figures: capitalised words after the first, and anything with a digit."""
    return {w.lower() for n, w in enumerate(words(question)) if is_figure(w) or is_name(n, w)}


def finite_numbers(value: Any, length: int) -> bool:
    """`value` is a list of `length` finite numbers (not booleans), as a stored model's parameters must be."""
    return (isinstance(value, list) and len(value) == length
            and all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in value))


def keyword_coverage(question: str, findings: list[str]) -> float:
    return coverage(set(tokenize(question)), set(tokenize(" ".join(findings))))


def feature_values(point: DecisionPoint, embed: Embed) -> dict[str, float]:
    """Every feature of FEATURES by name."""
    last, earlier = point.steps[-1], point.steps[:-1]
    findings = [s.finding for s in point.steps]
    research = [c for c in point.calls if c.module != POLICY_MODULE]
    found_words = {w.lower() for f in findings for w in words(f)}
    covered = keyword_coverage(point.question, findings)
    return {
        "steps_done": len(point.steps),
        "plan_length": point.plan_length,
        "steps_left": point.steps_left,
        "plan_done": (point.plan_length - point.steps_left) / point.plan_length,
        "revisions": point.revisions,
        "retrieved": len(last.retrieved),
        "retrieved_top": top(last.retrieved),
        "retrieved_margin": margin(last.retrieved),
        "reranked_top": top(last.reranked),
        "reranked_margin": margin(last.reranked),
        "new_passages": new_share(last, earlier),
        "novelty": novelty(findings, embed),
        "keyword_coverage": covered,
        "keyword_gain": covered - keyword_coverage(point.question, findings[:-1]),
        "entity_coverage": coverage(entities(point.question), found_words),
        "nothing_found": float(not last.reranked),
        "web_step": float(last.tool == "search_web"),
        "web_failed": float(last.web_error is not None),
        "degraded": sum(c.degraded for c in research),
        "lm_calls": sum(c.attempts for c in research),
        "kilotokens": sum(c.prompt_tokens + c.completion_tokens for c in research) / 1000,
    }


def vector(values: dict[str, float]) -> list[float]:
    """The features in FEATURES order, as the classifier takes them."""
    return [float(values[name]) for name in FEATURES]


def embed_texts(texts: list[str]) -> np.ndarray:
    """Unit vectors from the packaged MiniLM, whatever the index embeds with: novelty was learned on it."""
    from dspy_rag.embeddings import SentenceEmbedding

    return np.asarray(SentenceEmbedding().embed(texts, threads=1))
