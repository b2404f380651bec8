"""Citations: number passages for the LM, then turn its [n] markers into named sources.

Small models cite short numbers far more reliably than long section titles, so the LM sees `[2]` and
the user sees `[Item 7. Management's Discussion and Analysis ...]`.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dspy_rag.retrieval import Passage

_MARKER = re.compile(r"\[(\d+(?:\s*[,;]\s*\d+)*)\]")


@dataclass(frozen=True)
class Citation:
    label: str
    source: str
    section: str
    chunk_id: str


def source_name(source: str) -> str:
    return source if source.startswith(("http://", "https://")) else Path(source).name


def label_of(passage: Passage) -> str:
    return passage.section or source_name(passage.source)


def number_passages(passages: Sequence[Passage]) -> list[str]:
    return [f"[{n}] {source_name(p.source)} | {label_of(p)}\n{p.text}" for n, p in enumerate(passages, start=1)]


def _squash(text: str) -> str:
    """Lowercase words, numbers, '$' and '%'; a period survives only inside a number such as 15.01."""
    text = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", text.lower())
    return " ".join(re.sub(r"[^\w$%.]+", " ", text).split())


def quoted_in(evidence: str, passages: Sequence[Passage]) -> list[int]:
    """Numbers of the passages that contain the evidence quote (ignoring case, spacing and punctuation)."""
    quote = _squash(evidence)
    if len(quote) < 8:  # too short to tell passages apart
        return []
    return [n for n, p in enumerate(passages, start=1) if quote in _squash(p.text)]


def resolve(
    answer: str, cited: Sequence[int], passages: Sequence[Passage], evidence: str = ""
) -> tuple[str, list[Citation]]:
    """Replace [n] markers by [source label]; numbers that name no passage are dropped, not invented.

    When the answer carries no inline markers, it cites the passages that contain its evidence quote
    (a check small models cannot get wrong) or, failing that, the passages the LM listed.
    """
    used: list[int] = []

    def valid(numbers: str) -> list[int]:
        return [n for n in (int(x) for x in re.split(r"\s*[,;]\s*", numbers)) if 1 <= n <= len(passages)]

    def render(match: re.Match[str]) -> str:
        numbers = valid(match.group(1))
        used.extend(numbers)
        return " ".join(f"[{label_of(passages[n - 1])}]" for n in dict.fromkeys(numbers))

    rendered = " ".join(_MARKER.sub(render, answer).split())
    if not used:
        listed = quoted_in(evidence, passages) or [n for n in dict.fromkeys(cited) if 1 <= n <= len(passages)]
        used.extend(listed)
        tail = " ".join(dict.fromkeys(f"[{label_of(passages[n - 1])}]" for n in listed))
        rendered = f"{rendered} {tail}".strip()
    citations = [
        Citation(label_of(p), p.source, p.section, p.id) for p in (passages[n - 1] for n in dict.fromkeys(used))
    ]
    return rendered, citations
