"""The synthesizer role: the short answer from the evidence, led by the evidence sentence that states it, then,
after several steps, each step's finding cited; its citations checked."""

import dspy
from dspy.utils.exceptions import ContextWindowExceededError

from dspy_rag.citations import (
    check_citations,
    citation_validity,
    number_passages,
    resolve,
    restates,
    sentences,
    supports,
    with_marker,
    word_overlap,
)
from dspy_rag.config import TierConfig
from dspy_rag.pipelines.conflict_note import ConflictGuard, as_json, with_conflicts
from dspy_rag.pipelines.corroboration import single_source
from dspy_rag.pipelines.research_run import ResearchRun
from dspy_rag.pipelines.short_answer import ShortAnswer, cited_lead
from dspy_rag.pipelines.step_answer import answer_in
from dspy_rag.pipelines.trajectory import Trajectory
from dspy_rag.retrieval import Passage

NOTHING_FOUND = "The research found no passage that answers the question."


def cited_from(sentence: str, numbers: list[int], evidence: list[Passage]) -> str:
    """The sentence citing the first of the passages `numbers` that states it, or else the one sharing most of
    its words (the citation check still flags it; the label points at the likeliest source)."""
    closest = max(numbers, key=lambda n: word_overlap(sentence, evidence[n - 1].text) or 0.0)
    return with_marker(sentence, next((n for n in numbers if supports(sentence, evidence[n - 1])), closest))


def with_findings(lead: str, evidence: list[Passage], record: Trajectory) -> str:
    """The lead, then each step's finding that it does not restate, cited by the step's passage that states it
    (or the one sharing most of its words, which the citation check then flags)."""
    number = {p.id: n for n, p in enumerate(evidence, start=1)}
    out = [lead]
    for step in record.steps:
        own = [number[p] for p in step.used_passages if p in number]
        if own and not restates(step.finding, lead):
            out += [cited_from(sentence, own, evidence) for sentence in sentences(step.finding)]
    return " ".join(out)


class Synthesizer(dspy.Module):
    """Answers the question from the evidence. The findings stay out of the short answer's prompt: a small
    model's paraphrase that names the wrong figure outvotes the passages."""

    def __init__(self, conflict_guard: ConflictGuard | None = None) -> None:
        super().__init__()
        self.short_answer = ShortAnswer()
        self.conflict_guard = conflict_guard or ConflictGuard(TierConfig())

    def forward(self, question: str, findings: list[str], evidence: list[Passage], run: ResearchRun,
                kinds: dict[str, str]) -> dspy.Prediction:
        """`kinds`: each ingested source's document type, which ranks it for the conflicts guard."""
        record = run.trajectory
        if not evidence:
            return self.stated(NOTHING_FOUND, "", findings, run)
        short, evidence = self.answer_fitting(question, findings, evidence, run)
        short, found, fired = self.conflict_guard(question, short, evidence, kinds)
        for each in fired:
            run.guarded(each)
        draft = cited_lead(short, question, evidence)
        if len(record.steps) > 1:  # one step's finding says what the lead says, in a small model's words
            draft = with_findings(draft, evidence, record)
        draft = with_conflicts(draft, found, evidence)
        record.conflicts = [as_json(c, evidence) for c in found]
        record.single_source = single_source(short, evidence) if record.web != "off" else None
        answer, citations = resolve(draft, evidence)
        checks = check_citations(draft, evidence)
        record.answer, record.short_answer, record.citations = answer, short, [vars(c) for c in citations]
        record.flagged = [{"sentence": c.sentence, "reason": c.reason} for c in checks if c.reason]
        record.citation_validity = citation_validity(checks)
        record.seconds = round(run.calls.elapsed, 3)
        return dspy.Prediction(answer=answer, short_answer=short, draft=draft, citations=citations,
                               flagged=record.flagged, passages=evidence, findings=findings, trajectory=record,
                               conflicts=record.conflicts, single_source=record.single_source)

    @staticmethod
    def stated(answer: str, short: str, findings: list[str], run: ResearchRun) -> dspy.Prediction:
        """An answer that cites nothing (nothing was found, or the router answered), recorded like any other."""
        record = run.trajectory
        record.answer, record.short_answer, record.citations, record.flagged = answer, short, [], []
        record.citation_validity = None
        record.seconds = round(run.calls.elapsed, 3)
        return dspy.Prediction(answer=answer, short_answer=short, draft=answer, citations=[], flagged=[],
                               passages=[], findings=findings, trajectory=record, conflicts=[], single_source=None)

    def answer_fitting(self, question: str, findings: list[str], evidence: list[Passage], run: ResearchRun
                       ) -> tuple[str, list[Passage]]:
        """The short answer, and the evidence it was written from: the evidence budget is an estimate in
        characters, so a prompt that still overflows the context window is asked again with its first half (the
        question's own passages come first), and the trajectory says so."""
        fallback = dspy.Prediction(short_answer=answer_in(findings[-1], question) or "" if findings else "")
        while True:
            try:
                return run.calls("answer", self.short_answer, lambda: fallback, final=True, question=question,
                                 passages=number_passages(evidence)).short_answer, evidence
            except ContextWindowExceededError:
                if len(evidence) == 1:
                    raise
                evidence = evidence[: len(evidence) // 2]
                run.note(run.trajectory.notes, f"the evidence did not fit the context window; answered from its "
                                               f"first {len(evidence)} passages")
