"""The answer check both programs end with: the conflicts guard over the short answer, the cited lead sentence
(and what the deep program adds after it), each conflict's sentences, the citation check, the repair of the
sentences it flags (when a repair is given), and the single-source check (web on)."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dspy_rag.citations import Citation, SentenceCheck, check_citations, citation_validity, resolve
from dspy_rag.pipelines.conflict_note import ConflictGuard, as_json, with_conflicts
from dspy_rag.pipelines.corroboration import single_source
from dspy_rag.pipelines.guards import Fired
from dspy_rag.pipelines.short_answer import cited_lead
from dspy_rag.retrieval import Passage

# (question, short answer, draft, its checks, evidence) -> the draft to give and its checks
Repair = Callable[[str, str, str, list[SentenceCheck], list[Passage]], tuple[str, list[SentenceCheck]]]


@dataclass(frozen=True)
class CheckedAnswer:
    short_answer: str  # the conflicts guard's preferred value, when the LM's named another
    draft: str  # written with [n] markers
    answer: str  # the markers resolved to source labels
    citations: list[Citation]
    flagged: list[dict[str, Any]]  # each unsupported sentence and why
    citation_validity: float | None
    conflicts: list[dict[str, Any]]
    single_source: dict[str, str] | None


def flagged_of(checks: list[SentenceCheck]) -> list[dict[str, Any]]:
    return [{"sentence": c.sentence, "reason": c.reason} for c in checks if c.reason]


def checked_answer(question: str, short_answer: str, evidence: list[Passage], conflict_guard: ConflictGuard,
                   kinds: Mapping[str, str], web: bool, guarded: Callable[[Fired], None],
                   after_lead: Callable[[str], str] = lambda lead: lead, repair: Repair | None = None
                   ) -> CheckedAnswer:
    """The cited answer to the short answer from the evidence, checked. `kinds` ranks the sources for the
    conflicts guard (`document_kinds`), `guarded` hears each of its firings, `after_lead` adds what follows the
    lead sentence, `repair` mends a draft with flagged sentences; `web`: whether the web was searched."""
    short, found, fired = conflict_guard(question, short_answer, evidence, kinds)
    for each in fired:
        guarded(each)
    draft = with_conflicts(after_lead(cited_lead(short, question, evidence)), found, evidence)
    checks = check_citations(draft, evidence)
    if repair is not None and any(c.reason for c in checks):
        draft, checks = repair(question, short, draft, checks, evidence)
    answer, citations = resolve(draft, evidence)
    return CheckedAnswer(short, draft, answer, citations, flagged_of(checks), citation_validity(checks),
                         [as_json(c, evidence) for c in found], single_source(short, evidence) if web else None)
