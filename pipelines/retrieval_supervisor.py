"""The retrieval supervisor role: which search a documents step runs (vector, keyword or hybrid)."""

import dspy

from dspy_rag.pipelines.research_run import ResearchRun
from dspy_rag.signatures import ChooseStrategy


class RetrievalSupervisor(dspy.Module):
    """Chooses a step's search strategy from its query."""

    def __init__(self) -> None:
        super().__init__()
        self.predict = dspy.Predict(ChooseStrategy)

    def forward(self, query: str, index: int, run: ResearchRun) -> dspy.Prediction:
        chosen = run.calls("supervise", self.predict, lambda: dspy.Prediction(strategy="hybrid", reason="fallback"),
                           step=index, query=query)
        run.event("strategy", f"{chosen.strategy} ({chosen.reason})")
        return chosen
