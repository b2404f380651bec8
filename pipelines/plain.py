"""The plainest RAG, as a yardstick: the question's five best hybrid passages and a one-line instruction, one
LM call, a few-word answer, no JSON and no DSPy signature; what a user could write in twenty lines. Both
programs must beat it."""

import dspy

from dspy_rag.citations import number_passages
from dspy_rag.retrieval import Retriever

TOP_PASSAGES = 5
INSTRUCTION = "Answer the question using only the passages. Reply with a short answer (a few words)."
MAX_TOKENS = 32


class PlainRAG(dspy.Module):
    def __init__(self, retriever: Retriever) -> None:
        super().__init__()
        self.retriever = retriever

    def forward(self, question: str) -> dspy.Prediction:
        passages = self.retriever.search(question, "hybrid")[:TOP_PASSAGES]
        prompt = "\n\n".join([*number_passages(passages), f"Question: {question}", INSTRUCTION])
        [reply] = dspy.settings.lm(messages=[{"role": "user", "content": prompt}], max_tokens=MAX_TOKENS)
        text = (reply.get("text", "") if isinstance(reply, dict) else reply).strip()
        short = text.splitlines()[0].strip() if text else ""
        return dspy.Prediction(answer=short, short_answer=short, draft="", citations=[], passages=passages)
