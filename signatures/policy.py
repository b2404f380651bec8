"""Decide: after each step, continue the plan, revise it, or finish and answer."""

from typing import Literal

import dspy

Decision = Literal["CONTINUE", "REVISE", "FINISH"]


class DecideNext(dspy.Signature):
    """Decide what the research does next. FINISH when the findings already answer every part of the
    question; CONTINUE when the remaining steps are still needed; REVISE when a finding shows the
    remaining steps are wrong or something the plan missed must be looked up."""

    question: str = dspy.InputField()
    remaining_steps: list[str] = dspy.InputField(desc="sub-questions not yet researched")
    findings: list[str] = dspy.InputField(desc="one sentence per step done so far")
    decision: Decision = dspy.OutputField()
    reason: str = dspy.OutputField(desc="a few words")
