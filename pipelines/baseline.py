"""The single-shot baseline: one retrieval of the question (hybrid, plus the web when on), reranked; one
short answer; the sentence of the passages that states it, cited, checked as the deep program's answer is
(pipelines/answer_check.py).

The yardstick for the deep program: one LM call, so no repair pass (a second call) over what the check flags.
"""

from dataclasses import asdict

import dspy

from dspy_rag.citations import number_passages
from dspy_rag.config import TierConfig
from dspy_rag.pipelines.answer_check import checked_answer
from dspy_rag.pipelines.conflict_note import ConflictGuard, document_kinds
from dspy_rag.pipelines.evidence import question_passages
from dspy_rag.pipelines.lm_calls import Unparseable, predict_parsed
from dspy_rag.pipelines.short_answer import ShortAnswer
from dspy_rag.reranker import Reranker
from dspy_rag.retrieval import Retriever
from dspy_rag.web import WebSearch


class BaselineRAG(dspy.Module):
    def __init__(self, retriever: Retriever, top_n: int = 4, web: WebSearch | None = None,
                 reranker: Reranker | None = None, injection_guard: bool = True,
                 conflict_guard: ConflictGuard | None = None) -> None:
        super().__init__()
        self.injection_guard = injection_guard
        self.conflict_guard = conflict_guard or ConflictGuard(TierConfig())
        self.retriever = retriever
        self.top_n = top_n
        self.web = web
        self.reranker = reranker
        self.answer = ShortAnswer()

    def forward(self, question: str) -> dspy.Prediction:
        passages, web_error, fired = question_passages(question, self.retriever, self.reranker, self.web, self.top_n,
                                                       self.injection_guard)
        guards = [asdict(f) for f in fired]
        if not passages:
            return dspy.Prediction(answer="The index holds no passage that matches the question.", short_answer="",
                                   draft="", citations=[], passages=[], web_error=web_error, flagged=[], guards=guards,
                                   conflicts=[], single_source=None)
        result, attempts = predict_parsed(self.answer, {"question": question, "passages": number_passages(passages)})
        if result is None:  # one call, no findings: nothing honest to fall back on
            raise Unparseable(f"the answer's output did not parse in {attempts} attempts")
        checked = checked_answer(question, result.short_answer, passages, self.conflict_guard,
                                 document_kinds(self.retriever.index), self.web is not None,
                                 lambda fired: guards.append(asdict(fired)))
        return dspy.Prediction(answer=checked.answer, short_answer=checked.short_answer, draft=checked.draft,
                               citations=checked.citations, passages=passages, web_error=web_error,
                               flagged=checked.flagged, guards=guards, conflicts=checked.conflicts,
                               single_source=checked.single_source)
