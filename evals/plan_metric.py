"""How well a plan decomposes its question, against the question's gold plan (MuSiQue's decomposition, the 10-K
set's hand-written plans): the planner's own metric, which `compile --optimizer planner` optimizes its
instruction on with one planner call a question instead of a whole research run.

Two parts, averaged: as many distinct steps as the gold plan (a step asked again in the same words counts once,
as the repeated_step guard researches it once), and each gold step asked by a planned step of its own (token F1
of the two sub-questions, "the answer of step N" left out; each planned step matches one gold step at most). A
plan that asks the whole question again, once or four times, matches one gold step at best.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dspy

from dspy_rag.evals.metrics import token_f1
from dspy_rag.pipelines.guards import without_repeats
from dspy_rag.pipelines.lm_calls import LMCalls
from dspy_rag.pipelines.planner import Planner, planning_on
from dspy_rag.pipelines.research_run import ResearchRun, SharesTools
from dspy_rag.pipelines.trajectory import Trajectory
from dspy_rag.signatures import Step
from dspy_rag.signatures.planner import EARLIER_ANSWER

ASKED = 0.5  # a gold step whose best planned match has a lower F1 is reported as not asked


@dataclass(frozen=True)
class PlanMatch:
    distinct: int  # the plan's steps, its repeats left out
    written: int  # the plan's steps as the planner wrote them
    gold: int
    matched: tuple[float, ...]  # per gold step, the F1 of the planned step matched to it (0: none left)

    @property
    def steps(self) -> float:
        return min(self.distinct, self.gold) / max(self.distinct, self.gold, 1)

    @property
    def coverage(self) -> float:
        return sum(self.matched) / len(self.matched) if self.matched else 0.0

    @property
    def score(self) -> float:
        return (self.steps + self.coverage) / 2


def without_earlier_answers(step: Step) -> str:
    """A step's sub-question without its references to earlier answers, which every chain step shares."""
    return EARLIER_ANSWER.sub(" ", step.sub_question)


def match(planned: list[Step], gold: list[Step]) -> PlanMatch:
    """The plan against the gold plan: pairs taken best F1 first, each step of either plan in one pair at most."""
    distinct, _ = without_repeats(planned, 0)
    pairs = sorted(((token_f1(without_earlier_answers(p), without_earlier_answers(g)), i, j) for i, p in enumerate(distinct) for j, g in enumerate(gold)),
                   reverse=True)
    matched = [0.0] * len(gold)
    used: set[int] = set()
    for f1, i, j in pairs:
        if i not in used and not matched[j]:
            matched[j] = f1
            used.add(i)
    return PlanMatch(len(distinct), len(planned), len(gold), tuple(matched))


def feedback(result: PlanMatch, gold: list[Step]) -> str:
    """What the plan got wrong, in words a reflection model can act on."""
    repeats = result.written - result.distinct
    parts = [f"Score {result.score:.2f}.",
             f"The plan has {result.distinct} distinct step(s)"
             + (f" ({repeats} more repeated an earlier step word for word, which researches nothing new)"
                if repeats else "")
             + f"; the question needs {result.gold}:",
             *(f"{n}. {g.sub_question}" for n, g in enumerate(gold, start=1))]
    missing = [n for n, f1 in enumerate(result.matched, start=1) if f1 < ASKED]
    if missing:
        parts.append("No step asks gold step " + ", ".join(map(str, missing))
                     + "; a step should ask one fact, naming what an earlier step found as 'the answer of step N'.")
    return " ".join(parts)


def gold_plan(example: dspy.Example) -> list[Step]:
    """The example's gold plan (`steps`) as steps, however the example holds them."""
    return [s if isinstance(s, Step) else Step(**s) for s in example.steps]


class PlanMetric:
    """The plan's score against the example's gold plan (`steps`); with GEPA's arguments, the score and written
    feedback. `on_score` sees every scored plan (compile's progress)."""

    def __init__(self, on_score: Callable[[dspy.Example, dspy.Prediction, float], None] = lambda *_: None) -> None:
        self.on_score = on_score

    def __call__(self, example: dspy.Example, prediction: dspy.Prediction, trace: Any = None,
                 pred_name: str | None = None, pred_trace: Any = None) -> float | dspy.Prediction:
        gold = gold_plan(example)
        result = match(list(prediction.steps), gold)
        if pred_name is not None:  # GEPA asking for feedback on a plan it has already scored
            return dspy.Prediction(score=result.score, feedback=feedback(result, gold))
        self.on_score(example, prediction, result.score)
        return result.score


def with_gold_plans(examples: list[dspy.Example]) -> list[dspy.Example]:
    """The examples that have a gold plan, as `PlannerAlone` takes them: the question and its set."""
    return [dspy.Example(id=e.id, question=e.question, trainset=e.trainset, steps=e.steps)
            .with_inputs("question", "trainset") for e in examples if e.get("steps")]


class PlannerAlone(SharesTools, dspy.Module):
    """The program's planner on its own, given what the research gives it at the start on the question's set: the
    set's section titles, whether the web is on, no findings; on the program's planner model when it has one. Its
    plan comes back as the planner wrote it, repeats and all (the metric counts them), after the planner's other
    guards."""

    SHARED_TOOLS = frozenset({"planner_lm"})  # an optimizer's copies plan with the same loaded model

    def __init__(self, programs: dict[str, dspy.Module]) -> None:
        """`programs`: the deep program bound to each set's tools, by set name; the first one's planner is used."""
        super().__init__()
        first = next(iter(programs.values()))
        self.planner = Planner(first.planner.guards.model_copy(update={"repeated_step": False}))
        self.planner.predict.load_state(first.planner.predict.dump_state())
        self.budgets = first.budgets
        self.planner_lm: dspy.LM | None = first.planner_lm
        self.tools = {name: (p.retriever.index.section_titles, p.web is not None) for name, p in programs.items()}

    def forward(self, question: str, trainset: str) -> dspy.Prediction:
        sections, web_available = self.tools[trainset]
        record = Trajectory(question, "plan", "none", "on" if web_available else "off")
        run = ResearchRun(record, LMCalls(self.budgets, record.calls), lambda kind, text: None)
        with planning_on(self.planner_lm):
            return self.planner(question=question, sections=sections, web_available=web_available, findings=[],
                                run=run)
