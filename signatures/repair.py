"""Repair: the answer's sentences the citation check flagged, rewritten from the passages or dropped."""

import dspy


class RepairAnswer(dspy.Signature):
    """Each of these sentences of an answer cites no passage, or cites one that does not state it. Rewrite each
    so that it says only what one numbered passage states, copying names, dates and figures exactly as written,
    and end it with that passage's number like [2]. Reply with an empty string for a sentence no passage
    supports. Give one reply per sentence, in order."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc="numbered passages, each headed by its source and section")
    unsupported: list[str] = dspy.InputField(desc="the answer's unsupported sentences, with their [n] markers")
    rewrites: list[str] = dspy.OutputField(desc="one per unsupported sentence, in order: rewritten, or empty to "
                                           "drop it")
