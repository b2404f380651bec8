"""The single-shot baseline: one hybrid retrieval, one cited answer. The yardstick for the deep program."""

import dspy

from dspy_rag.citations import number_passages, resolve
from dspy_rag.retrieval import Retriever
from dspy_rag.signatures import AnswerFromPassages


class BaselineRAG(dspy.Module):
    def __init__(self, retriever: Retriever, top_n: int = 5) -> None:
        super().__init__()
        self.retriever = retriever
        self.top_n = top_n
        self.answer = dspy.Predict(AnswerFromPassages)

    def forward(self, question: str) -> dspy.Prediction:
        passages = self.retriever.search(question, "hybrid")[: self.top_n]
        if not passages:
            return dspy.Prediction(answer="The index holds no passage that matches the question.",
                                   citations=[], passages=[])
        result = self.answer(question=question, passages=number_passages(passages))
        answer, citations = resolve(result.answer, result.cited_passages, passages, result.evidence)
        return dspy.Prediction(answer=answer, citations=citations, passages=passages)
