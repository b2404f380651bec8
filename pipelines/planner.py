"""The planner role: the research's steps, checked by the web_routing and repeated_step guards."""

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import dspy

from dspy_rag.config import GuardConfig
from dspy_rag.pipelines.guards import routed_to_web, without_steps_done
from dspy_rag.pipelines.research_run import ResearchRun
from dspy_rag.signatures import PlanResearch, Step

MAX_SECTIONS_SHOWN = 40  # a corpus of many small documents has a title per passage: too many to plan with


def planning_on(lm: dspy.LM | None) -> AbstractContextManager[Any]:
    """The planner's calls inside go to `lm`, the planner's own model, or to the configured model without one."""
    return dspy.context(lm=lm) if lm is not None else nullcontext()


class Planner(dspy.Module):
    """Plans the research from the question, the documents' section titles and the findings so far."""

    def __init__(self, guards: GuardConfig) -> None:
        super().__init__()
        self.guards = guards
        self.predict = dspy.Predict(PlanResearch)

    def forward(self, question: str, sections: list[str], web_available: bool, findings: list[str],
                run: ResearchRun) -> dspy.Prediction:
        """The steps left to research (the plan's, less those already done in the same words) and the answers of
        the steps already done: what the plan's "the answer of step N" stands for."""
        one_step = [Step(sub_question=question, tool="search_docs", justification="fallback: the question as is")]
        planned = run.calls("plan", self.predict, lambda: dspy.Prediction(steps=one_step), question=question,
                            sections=sections if len(sections) <= MAX_SECTIONS_SHOWN else [],
                            web_available=web_available, findings=findings)
        steps = [s for s in planned.steps if s.sub_question.strip()] or one_step
        if web_available and self.guards.web_routing:
            steps, routed = routed_to_web(question, steps)
            for fired in routed:
                run.guarded(fired)
        record = run.trajectory
        answers: list[str | None] = []
        if self.guards.repeated_step:
            steps, answers, skipped = without_steps_done(steps, record.steps)
            for fired in skipped:
                run.guarded(fired)
        # The plan as it will be researched: its length is what the policy's features count.
        record.plans.append([s.model_dump() for s in steps])
        verb = "plan" if len(record.plans) == 1 else "revised plan"
        run.event("plan", f"{verb}: " + " | ".join(f"{s.sub_question} ({s.tool})" for s in steps))
        return dspy.Prediction(steps=steps, answers=answers)
