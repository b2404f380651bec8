"""Distill: boil the step's top passages down to the facts that bear on its sub-question."""

import dspy


class DistillPassages(dspy.Signature):
    """Extract from the numbered passages only what answers the sub-question: at most three short
    sentences, copying names, dates and figures exactly as written, each ending with its passage number
    like [2]. Say "nothing relevant" if no passage bears on it."""

    sub_question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc="numbered passages, each headed by its source and section")
    context: str = dspy.OutputField(desc="compact notes for this sub-question")
    used_passages: list[int] = dspy.OutputField(desc="numbers of the passages the notes come from")
