"""The short answer, as its own plain-text call, and the evidence sentence that states it, found by code.

Both programs answer this way: a few words from the passages first (the form the local models answer best
in), then the cited sentence of the passages that holds them, so every citation can be checked word for word.
"""

from collections.abc import Sequence
from typing import Any

import dspy

from dspy_rag import answer_stream
from dspy_rag.citations import answer_overlap, sentences, with_marker, word_overlap
from dspy_rag.plain_adapter import PlainAdapter, answer_so_far
from dspy_rag.retrieval import Passage
from dspy_rag.signatures import AnswerBriefly

MAX_TOKENS = 48  # "a few words"; a longer reply is cut here and then trimmed to whole words
MIN_HELD = 0.5  # a sentence holding fewer of the short answer's words does not state it
JOINERS = frozenset("a an the of in on at to for from by with and or but as than up down".split())


def whole_words(text: str, cut: bool) -> str:
    """The reply whole: when the token cap cut it, its last (possibly partial) word and any dangling joiner
    ("up 41% from fiscal") go, and the answer ends on a whole word or figure."""
    text = text.strip().rstrip(",;:")
    if not cut:
        return text
    words = text.split()[:-1]
    while words and words[-1].lower().strip(",;:") in JOINERS:
        words.pop()
    return " ".join(words).rstrip(",;:")


def settled(reply: str) -> str:
    """The start of the short answer that a reply still being written gives whatever follows: its answer line so
    far to its last whole word, no dangling joiner (the next words may still be cut by the token cap)."""
    return whole_words(answer_so_far(reply), cut=True)


def stating_sentence(short_answer: str, question: str, passages: Sequence[Passage]) -> tuple[int, str] | None:
    """The passage number and sentence that state the short answer: the sentence holding most of its words,
    ties going to the one sharing most words with the question, then to the earlier passage."""
    candidates = [(answer_overlap(short_answer, sentence) or 0.0, word_overlap(question, sentence) or 0.0, -n, sentence)
                  for n, passage in enumerate(passages, start=1)
                  for sentence in sentences(" ".join(passage.text.split()))]
    best = max(candidates, key=lambda c: c[:3], default=None)
    return (-best[2], best[3]) if best is not None and best[0] >= MIN_HELD else None


class ShortAnswer(dspy.Module):
    """A few words answering the question from numbered passages, in plain text."""

    def __init__(self) -> None:
        super().__init__()
        self.predict = dspy.Predict(AnswerBriefly)

    def forward(self, question: str, passages: list[str], config: dict[str, Any] | None = None) -> dspy.Prediction:
        """The short answer; a run that listens hears it as the model writes it (`answer_stream`)."""
        lm = dspy.settings.lm
        draft = answer_stream.draft(settle=settled)
        with dspy.context(adapter=PlainAdapter(), **answer_stream.streaming(draft)):
            result = self.predict(question=question, passages=passages,
                                  config={"max_tokens": MAX_TOKENS, **(config or {})})
        response = lm.history[-1].get("response") if lm.history else None
        cut = getattr(response, "finish_reason", None) == "length"
        short = whole_words(result.short_answer, cut)
        if draft is not None:
            draft.finished(short)
        return dspy.Prediction(short_answer=short)


def cited_lead(short_answer: str, question: str, passages: Sequence[Passage]) -> str:
    """The answer's first sentence: the passage sentence that states the short answer, cited; else the short
    answer alone, which the citation check then flags."""
    found = stating_sentence(short_answer, question, passages)
    if found is None:
        return short_answer.rstrip(".") + "."
    number, sentence = found
    return with_marker(sentence if sentence[-1:] in ".!?" else sentence + ".", number)
