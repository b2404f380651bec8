"""Answer briefly: the answer alone, in a few words, from the passages."""

import dspy


class AnswerBriefly(dspy.Signature):
    """Answer the question using only the passages. Reply with a short answer (a few words)."""

    passages: list[str] = dspy.InputField()
    question: str = dspy.InputField()
    short_answer: str = dspy.OutputField()
