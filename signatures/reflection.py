"""Reflect: record what the step found, as one sentence for the research history."""

import dspy


class Reflect(dspy.Signature):
    """State in one sentence what the notes establish about the sub-question, naming the entity, figure or
    date found; if the notes do not answer it, say what is still missing."""

    sub_question: str = dspy.InputField()
    context: str = dspy.InputField(desc="notes distilled from the step's passages")
    finding: str = dspy.OutputField(desc="one sentence")
