"""Synthesize: write the final answer from the evidence, every factual sentence cited."""

import dspy


class SynthesizeAnswer(dspy.Signature):
    """Answer the question from the numbered evidence and the findings. Start with the direct answer,
    repeating names and figures exactly as the evidence writes them; then add what the question asks to
    explain. End every factual sentence with the bracketed number of its evidence passage, like [2].
    Say plainly what the evidence does not cover."""

    question: str = dspy.InputField()
    findings: list[str] = dspy.InputField(desc="one sentence per research step")
    evidence: list[str] = dspy.InputField(desc="numbered passages, each headed by its source and section")
    answer: str = dspy.OutputField(desc="a concise answer whose sentences end with [passage number] citations")
    short_answer: str = dspy.OutputField(desc="the answer alone, as few words as possible: a name, figure, date, "
                                         "or yes/no")
