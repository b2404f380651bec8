"""The single-shot baseline: one hybrid retrieval (plus the web, when on), one cited answer.

The yardstick for the deep program.
"""

import dspy

from dspy_rag.citations import number_passages, resolve
from dspy_rag.pipelines.lm_calls import Unparseable, predict_parsed
from dspy_rag.retrieval import Retriever, fuse
from dspy_rag.signatures import AnswerFromPassages
from dspy_rag.web import WebSearch, WebSearchError


class BaselineRAG(dspy.Module):
    def __init__(self, retriever: Retriever, top_n: int = 4, web: WebSearch | None = None) -> None:
        super().__init__()
        self.retriever = retriever
        self.top_n = top_n
        self.web = web
        self.answer = dspy.Predict(AnswerFromPassages)

    def forward(self, question: str) -> dspy.Prediction:
        rankings = [self.retriever.search(question, "hybrid")]
        web_error = None
        if self.web is not None:
            try:
                rankings.append(self.web.search(question, self.retriever.top_k))
            except WebSearchError as exc:  # the answer goes on from the documents; the error is reported
                web_error = str(exc)
        passages = fuse(rankings, self.retriever.rrf_k)[: self.top_n]
        if not passages:
            return dspy.Prediction(answer="The index holds no passage that matches the question.", short_answer="",
                                   draft="", citations=[], passages=[], web_error=web_error)
        result, attempts = predict_parsed(self.answer, {"question": question, "passages": number_passages(passages)})
        if result is None:  # one call, no findings: nothing honest to fall back on
            raise Unparseable(f"the answer's output did not parse in {attempts} attempts")
        answer, citations = resolve(result.answer, result.cited_passages, passages, result.evidence)
        return dspy.Prediction(answer=answer, short_answer=result.short_answer, draft=result.answer, citations=citations, passages=passages,
                               web_error=web_error)
