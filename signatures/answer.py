"""Answer a question from numbered passages, citing the passages that support it."""

import dspy


class AnswerFromPassages(dspy.Signature):
    """Answer the question using only the numbered passages. First copy, word for word, the sentence that
    answers the question most directly. Then answer in one to three sentences, repeating names and figures
    exactly as written there, and end each sentence with the bracketed number of its passage, like [2].
    If no passage answers the question, say so."""

    passages: list[str] = dspy.InputField(desc="numbered passages, each headed by its source and section")
    question: str = dspy.InputField()
    evidence: str = dspy.OutputField(desc="the sentence, copied from one passage, that answers the question")
    answer: str = dspy.OutputField(desc="a concise answer whose sentences end with [passage number] citations")
    cited_passages: list[int] = dspy.OutputField(desc="the numbers of the passages the answer relies on")
    short_answer: str = dspy.OutputField(desc="the answer alone, as few words as possible: a name, figure, date, "
                                         "or yes/no")
