"""Corroboration (both programs, web on): the answer's key claim, its short answer, stated by one source alone is
flagged single-source; with the web on a second, independent source could have confirmed it and did not."""

from collections.abc import Sequence
from urllib.parse import urlsplit

from dspy_rag.citations import answer_overlap
from dspy_rag.figures import same_value, values_in
from dspy_rag.pipelines.short_answer import MIN_HELD
from dspy_rag.retrieval import Passage


def _states(passage: Passage, short_answer: str) -> bool:
    """The passage holds each figure of the short answer, or most of its words when it names none."""
    wanted = values_in(short_answer)
    if wanted:
        held = values_in(passage.text)
        return all(any(same_value(w, h) for h in held) for w in wanted)
    return (answer_overlap(short_answer, passage.text) or 0.0) >= MIN_HELD


def _independent(source: str) -> str:
    """What makes a source independent of another: its web site (pages of one site are one source), else itself."""
    host = urlsplit(source).hostname if source.startswith(("http://", "https://")) else None
    return host.removeprefix("www.") if host else source


def single_source(short_answer: str, evidence: Sequence[Passage]) -> dict[str, str] | None:
    """The short answer and the one source stating it, when no other source of the evidence does; None when two
    or more do, or none (the citation check flags that)."""
    stating = {_independent(p.source): p.source for p in evidence if short_answer and _states(p, short_answer)}
    return {"claim": short_answer, "source": next(iter(stating.values()))} if len(stating) == 1 else None
