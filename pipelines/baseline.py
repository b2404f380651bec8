"""The single-shot baseline: one retrieval of the question (hybrid, plus the web when on), reranked; one
short answer; the sentence of the passages that states it, cited.

The yardstick for the deep program.
"""

from dataclasses import asdict

import dspy

from dspy_rag.citations import check_citations, number_passages, resolve
from dspy_rag.config import TierConfig
from dspy_rag.pipelines.conflict_note import ConflictGuard, as_json, document_kinds, with_conflicts
from dspy_rag.pipelines.corroboration import single_source
from dspy_rag.pipelines.evidence import question_passages
from dspy_rag.pipelines.lm_calls import Unparseable, predict_parsed
from dspy_rag.pipelines.short_answer import ShortAnswer, cited_lead
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
        short, found, fired = self.conflict_guard(question, result.short_answer, passages,
                                                  document_kinds(self.retriever.index))
        guards += [asdict(f) for f in fired]
        draft = with_conflicts(cited_lead(short, question, passages), found, passages)
        answer, citations = resolve(draft, passages)
        flagged = [{"sentence": c.sentence, "reason": c.reason} for c in check_citations(draft, passages) if c.reason]
        return dspy.Prediction(answer=answer, short_answer=short, draft=draft, citations=citations,
                               passages=passages, web_error=web_error, flagged=flagged, guards=guards,
                               conflicts=[as_json(c, passages) for c in found],
                               single_source=single_source(short, passages) if self.web is not None else None)
