"""The policy role: after each step, CONTINUE, REVISE or FINISH, decided by the policy LM, the learned classifiers
or the plan, with the keep_going guard deciding first."""

from typing import Literal

import dspy

from dspy_rag.pipelines.guards import must_go_on
from dspy_rag.pipelines.learned_policy import LearnedPolicy
from dspy_rag.pipelines.lm_calls import LMCalls
from dspy_rag.pipelines.policy_features import live_point
from dspy_rag.pipelines.research_run import ResearchRun
from dspy_rag.signatures import DecideNext, Step

PolicyMode = Literal["llm", "plan", "learned"]
REVISED_ONCE = "traced: the first plan done, re-planned once"


def by_plan(steps_left: int) -> tuple[str, str]:
    return ("CONTINUE", "plan has steps left") if steps_left else ("FINISH", "plan done")


class ResearchPolicy(dspy.Module):
    """Decides what the research does next. `mode` llm asks the policy LM, learned asks the distilled classifiers,
    plan follows the plan (and with `revise_once`, which only the policy's labelling sets, re-plans once when the
    first plan is done)."""

    def __init__(self, mode: PolicyMode = "llm", learned: LearnedPolicy | None = None,
                 keep_going: bool = True) -> None:
        super().__init__()
        if mode == "learned" and learned is None:
            raise ValueError("policy 'learned' needs the LearnedPolicy to decide with")
        self.mode = mode
        self.learned = learned
        self.keep_going = keep_going
        self.revise_once = False
        self.predict = dspy.Predict(DecideNext)

    def forward(self, question: str, remaining: list[Step], findings: list[str], web_available: bool,
                run: ResearchRun) -> tuple[str, str]:
        """The decision and its reason, after the trajectory's last step."""
        record = run.trajectory
        if self.mode == "plan":  # the plan goes on to its end, so keep_going has nothing to stand over
            if self.revise_once and not remaining and len(record.plans) == 1:
                return "REVISE", REVISED_ONCE
            return by_plan(len(remaining))
        searched_web = any(step.tool == "search_web" for step in record.steps)
        if self.keep_going and (fired := must_go_on(remaining, searched_web, web_available)):
            run.guarded(fired, record.steps[-1].index)
            return "CONTINUE", f"keep_going: {fired.why}"
        if self.mode == "learned" and self.learned is not None:
            decision, probability, reason = self.learned.decide(live_point(question, record, len(remaining)))
            if probability is not None:
                setattr(record.steps[-1], "finish_probability" if remaining else "revise_probability",
                        round(probability, 4))
            return decision, reason
        decision, reason = self.ask(question, [s.sub_question for s in remaining], findings, run.calls)
        if decision == "CONTINUE" and not remaining:
            return "FINISH", f"{reason} (no steps left)"
        return decision, reason

    def ask(self, question: str, remaining: list[str], findings: list[str], calls: LMCalls) -> tuple[str, str]:
        """The policy LM's decision and reason; the plan's when its output never parses."""
        planned, why = by_plan(len(remaining))
        fallback = dspy.Prediction(decision=planned, reason=f"fallback: {why}")
        decided = calls("policy", self.predict, lambda: fallback, question=question, remaining_steps=remaining,
                        findings=findings)
        return decided.decision, decided.reason
