"""The distiller role: a step's reranked passages boiled down to notes on its sub-question, and the passages
the notes come from (the ones its finding cites)."""

import dspy

from dspy_rag.citations import number_passages
from dspy_rag.pipelines.research_run import ResearchRun
from dspy_rag.retrieval import Passage
from dspy_rag.signatures import DistillPassages

EVIDENCE_PER_STEP = 2  # the passages a step's finding cites


def first_sentence(text: str) -> str:
    return text.strip().split(". ")[0].rstrip(".") + "." if text.strip() else ""


class Distiller(dspy.Module):
    """Notes on a sub-question from its passages. Switched off (`roles.distiller: false`), or when its output never
    parses, the notes are the first sentences of the first passages, with no LM call."""

    def __init__(self, enabled: bool = True) -> None:
        super().__init__()
        self.enabled = enabled
        self.predict = dspy.Predict(DistillPassages)

    def forward(self, sub_question: str, passages: list[Passage], index: int, run: ResearchRun) -> dspy.Prediction:
        def leads() -> dspy.Prediction:
            return dspy.Prediction(context=" ".join(first_sentence(p.text) for p in passages[:EVIDENCE_PER_STEP]),
                                   used_passages=list(range(1, EVIDENCE_PER_STEP + 1)))

        distilled = (run.calls("distill", self.predict, leads, step=index, sub_question=sub_question,
                               passages=number_passages(passages)) if self.enabled else leads())
        used = [passages[n - 1] for n in dict.fromkeys(distilled.used_passages) if 1 <= n <= len(passages)]
        run.event("context", distilled.context)
        return dspy.Prediction(context=distilled.context, used=used[:EVIDENCE_PER_STEP] or passages[:1])
