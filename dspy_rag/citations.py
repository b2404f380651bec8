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


def resolve(answer: str, passages: Sequence[Passage]) -> tuple[str, list[Citation]]:
    """Replace [n] markers by [source label]; numbers that name no passage are dropped, not invented."""
    used: list[int] = []

    def valid(numbers: str) -> list[int]:
        return [n for n in (int(x) for x in re.split(r"\s*[,;]\s*", numbers)) if 1 <= n <= len(passages)]

    def render(match: re.Match[str]) -> str:
        numbers = valid(match.group(1))
        used.extend(numbers)
        return " ".join(f"[{label_of(passages[n - 1])}]" for n in dict.fromkeys(numbers))

    rendered = " ".join(_MARKER.sub(render, answer).split())
    citations = [
        Citation(label_of(p), p.source, p.section, p.id) for p in (passages[n - 1] for n in dict.fromkeys(used))
    ]
    return rendered, citations


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")
_MARKERS_AFTER_STOP = re.compile(r"([.!?])\s*((?:\[\d+(?:\s*[,;]\s*\d+)*\]\s*)+)")
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
_STOPWORDS = frozenset(
    "a an the and or but of in on at to for from by with as is are was were be been its it this that these those "
    "which who what when where how than then also has have had not no into over under about their there such".split())
_ADMITS_GAP = re.compile(r"\b(not|no|none)\b.*\b(evidence|information|mention\w*|cover\w*|found|say|state\w*)\b", re.I)
MIN_OVERLAP = 0.4  # small models paraphrase; below this share of content words, a passage is not the source
RESTATED = 0.6  # a sentence sharing this much of its wording with a finding says the finding again


@dataclass(frozen=True)
class SentenceCheck:
    sentence: str
    cited: list[int]
    supported_by: list[int]
    reason: str | None  # why the sentence is flagged; None when its citations hold


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9$%]+", _squash(text)) if w not in _STOPWORDS and len(w) > 2}


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUMBER.findall(text)}


def word_overlap(sentence: str, text: str) -> float | None:
    """Share of the sentence's content words (markers aside) that the text holds; None without content words."""
    words = _content_words(_MARKER.sub(" ", sentence))
    return len(words & _content_words(text)) / len(words) if words else None


def answer_overlap(answer: str, text: str) -> float | None:
    """Share of a short answer's words (stopwords aside; numbers and short names kept, "42" or "EU") that the
    text holds; None when it has none, and 0 when the text lacks one of its figures ("$15.01 billion" is not held
    by a text saying "$26.97 billion")."""
    words = set(_squash(answer).split()) - _STOPWORDS
    if not words:
        return None
    if not _numbers(answer) <= _numbers(text):
        return 0.0
    return len(words & set(_squash(text).split())) / len(words)


# Words that say where a value comes from ("According to acme-10k.md (the user's documents), it is ...") rather than what
# it is; in a sentence naming its passage's source they are no part of the claim checked against the passage.
ATTRIBUTION = frozenset("according source sources tier ranks above other prefers answer user documents primary "
                        "news another web page".split())
_WORD = re.compile(r"[A-Za-z][A-Za-z'’]*")


def claim_of(sentence: str, passage: Passage) -> str:
    """The sentence as a claim about the passage: without the passage's source name and, when it names it, the
    words that attribute the value to that source."""
    name = source_name(passage.source)
    if not name or name not in sentence:
        return sentence
    return _WORD.sub(lambda w: " " if re.sub(r"['’]s$", "", w.group().lower()) in ATTRIBUTION else w.group(),
                     sentence.replace(name, " "))


def supports(sentence: str, passage: Passage) -> bool:
    """Every figure of the sentence appears in the passage and enough of its words do."""
    sentence = claim_of(sentence, passage)
    if not _numbers(_MARKER.sub(" ", sentence)) <= _numbers(passage.text):
        return False
    overlap = word_overlap(sentence, passage.text)
    return overlap is None or overlap >= MIN_OVERLAP


def sentences(answer: str) -> list[str]:
    """The answer's sentences, each keeping the [n] markers written right after its full stop."""
    answer = _MARKERS_AFTER_STOP.sub(lambda m: f" {m.group(2).strip()}{m.group(1)} ", answer)  # "x. [2]" -> "x [2]."
    return [s.strip() for s in _SENTENCE_END.split(answer) if s.strip()]


def _cited(sentence: str) -> list[int]:
    return [int(x) for group in _MARKER.findall(sentence) for x in re.split(r"\s*[,;]\s*", group)]


def restates(sentence: str, text: str) -> bool:
    """Most of the sentence's content words are in the text: it says again what the text says."""
    overlap = word_overlap(sentence, text)
    return overlap is not None and overlap >= RESTATED


def with_marker(sentence: str, number: int) -> str:
    """The sentence citing passage `number`, the marker before its full stop."""
    body, stop = (sentence[:-1], sentence[-1]) if sentence[-1:] in (".", "!", "?") else (sentence, "")
    return f"{body.rstrip()} [{number}]{stop}"


def check_citations(answer: str, passages: Sequence[Passage]) -> list[SentenceCheck]:
    """Check each sentence of an answer written with [n] markers against the passages it cites."""
    checks = []
    for sentence in sentences(answer):
        cited = _cited(sentence)
        valid = [n for n in dict.fromkeys(cited) if 1 <= n <= len(passages)]
        supported = [n for n in valid if supports(sentence, passages[n - 1])]
        reason = None
        if not cited:
            if len(sentence.split()) >= 4 and not _ADMITS_GAP.search(sentence):
                reason = "no citation"
        elif len(valid) < len(set(cited)):
            reason = "cites a passage that was not retrieved"
        elif not supported:
            reason = "the cited passage does not state this"
        plain = re.sub(r"\s+([.,;:!?])", r"\1", _MARKER.sub("", sentence)).strip()
        checks.append(SentenceCheck(plain, cited, supported, reason))
    return checks


def citation_validity(checks: Sequence[SentenceCheck]) -> float | None:
    """Share of citations that point at a retrieved passage which states the sentence; None if none."""
    cited = sum(len(set(c.cited)) for c in checks)
    return sum(len(c.supported_by) for c in checks) / cited if cited else None
