"""The synthesizer role: the short answer from the evidence, led by the evidence sentence that states it, then,
after several steps, each step's finding cited; its citations checked, and its unsupported sentences repaired
when the repair role is on."""

from functools import partial

import dspy
from dspy.utils.exceptions import ContextWindowExceededError

from dspy_rag.citations import number_passages, restates, sentences, supports, with_marker, word_overlap
from dspy_rag.config import TierConfig
from dspy_rag.pipelines.answer_check import checked_answer
from dspy_rag.pipelines.conflict_note import ConflictGuard
from dspy_rag.pipelines.repair import Repair
from dspy_rag.pipelines.research_run import ResearchRun
from dspy_rag.pipelines.short_answer import ShortAnswer
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

    def __init__(self, conflict_guard: ConflictGuard | None = None, repair: bool = False) -> None:
        super().__init__()
        self.short_answer = ShortAnswer()
        self.conflict_guard = conflict_guard or ConflictGuard(TierConfig())
        self.repair = Repair(repair)

    def forward(self, question: str, findings: list[str], evidence: list[Passage], run: ResearchRun,
                kinds: dict[str, str]) -> dspy.Prediction:
        """`kinds`: each ingested source's document type, which ranks it for the conflicts guard."""
        record = run.trajectory
        if not evidence:
            return self.stated(NOTHING_FOUND, "", findings, run)
        short, evidence = self.answer_fitting(question, findings, evidence, run)
        checked = checked_answer(
            question, short, evidence, self.conflict_guard, kinds, record.web != "off", run.guarded,
            # one step's finding says what the lead says, in a small model's words
            (lambda lead: with_findings(lead, evidence, record)) if len(record.steps) > 1 else lambda lead: lead,
            partial(self.repair, run=run) if self.repair.enabled else None)
        record.answer, record.short_answer = checked.answer, checked.short_answer
        record.citations, record.flagged = [vars(c) for c in checked.citations], checked.flagged
        record.citation_validity, record.conflicts = checked.citation_validity, checked.conflicts
        record.single_source = checked.single_source
        record.seconds = round(run.calls.elapsed, 3)
        return dspy.Prediction(answer=checked.answer, short_answer=checked.short_answer, draft=checked.draft,
                               citations=checked.citations, flagged=record.flagged, passages=evidence,
                               findings=findings, trajectory=record, conflicts=record.conflicts,
                               single_source=record.single_source)

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
