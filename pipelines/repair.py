"""The repair role: one bounded LM pass over the answer's sentences the citation check flagged, each rewritten
from the same evidence or dropped; the repaired answer is checked again and kept only when it is no worse."""

import dspy
from dspy.utils.exceptions import ContextWindowExceededError

from dspy_rag.citations import SentenceCheck, answer_overlap, check_citations, number_passages, sentences
from dspy_rag.pipelines.lm_calls import BudgetExhausted
from dspy_rag.pipelines.research_run import ResearchRun
from dspy_rag.pipelines.trajectory import RepairRecord
from dspy_rag.retrieval import Passage
from dspy_rag.signatures import RepairAnswer

MAX_REPAIRED = 5  # the sentences one pass takes; the local engine caps a list at five items anyway


def held(short_answer: str, draft: str) -> float:
    """How much of the short answer the draft states: the share of its words it holds."""
    return answer_overlap(short_answer, draft) or 0.0


def flagged_count(checks: list[SentenceCheck]) -> int:
    return sum(1 for c in checks if c.reason)


def ended(sentence: str) -> str:
    """A rewrite as a sentence of its own: a reply without a full stop would run into the next sentence."""
    sentence = " ".join(sentence.split())
    return sentence if not sentence or sentence[-1] in ".!?" else sentence + "."


def verdict(short_answer: str, draft: str, checks: list[SentenceCheck], repaired: str,
            after: list[SentenceCheck]) -> tuple[bool, str]:
    """Whether the repaired draft is kept, and why: when the citation check flags fewer of its sentences and it
    states the short answer as fully as the draft did."""
    before, now = flagged_count(checks), flagged_count(after)
    if not repaired:
        return False, "it dropped every sentence"
    if now >= before:
        return False, f"the citation check flags {now} of its sentences, no fewer than {before}"
    if held(short_answer, repaired) < held(short_answer, draft):
        return False, "it no longer states the short answer"
    return True, f"the citation check flags {now} of its sentences, not {before}"


class Repair(dspy.Module):
    """Rewrites or drops the unsupported sentences of a draft answer. Off (`roles.repair: false`, the default),
    with the budget spent, or when its output never parses, the draft stays as it was and its sentences flagged."""

    def __init__(self, enabled: bool = False) -> None:
        super().__init__()
        self.enabled = enabled
        self.predict = dspy.Predict(RepairAnswer)

    def forward(self, question: str, short_answer: str, draft: str, checks: list[SentenceCheck],
                evidence: list[Passage], run: ResearchRun) -> tuple[str, list[SentenceCheck]]:
        """The draft to give and its checks: the repaired one when kept, else the draft as it came."""
        parts = sentences(draft)  # the check's own split: checks[i] is parts[i]
        flagged = [i for i, c in enumerate(checks) if c.reason][:MAX_REPAIRED]
        record = run.trajectory.repair = RepairRecord([parts[i] for i in flagged])
        rewrites = None
        try:
            rewrites = run.calls("repair", self.predict, lambda: dspy.Prediction(rewrites=None), question=question,
                                 passages=number_passages(evidence), unsupported=record.flagged).rewrites
        except BudgetExhausted as exc:
            record.why = f"skipped: {exc}"
        except ContextWindowExceededError:
            record.why = "skipped: the prompt does not fit the context window"
        if rewrites is None:
            record.why = record.why or "skipped: its output did not parse"
            run.event("repair", record.why)
            return draft, checks
        record.rewrites = [ended(r) for r in rewrites[: len(flagged)]]
        rewritten = dict(zip(flagged, record.rewrites, strict=False))  # a sentence given no rewrite stays
        candidate = " ".join(s for s in (rewritten.get(i, part) for i, part in enumerate(parts)) if s)
        after = check_citations(candidate, evidence)
        record.flagged_after = [c.sentence for c in after if c.reason]
        record.kept, record.why = verdict(short_answer, draft, checks, candidate, after)
        run.event("repair", f"{'kept' if record.kept else 'discarded'}: {record.why}")
        return (candidate, after) if record.kept else (draft, checks)
