"""The retrieval supervisor role: which search a documents step runs (vector, keyword or hybrid)."""

import dspy

from dspy_rag.pipelines.research_run import ResearchRun
from dspy_rag.pipelines.strategy_chooser import StrategyChooser
from dspy_rag.signatures import ChooseStrategy


class RetrievalSupervisor(dspy.Module):
    """Chooses a step's search strategy from its query: by the LM, or by the learned policy's chooser when the
    program decides with one."""

    def __init__(self, chooser: StrategyChooser | None = None) -> None:
        super().__init__()
        self.chooser = chooser
        self.predict = dspy.Predict(ChooseStrategy)

    def forward(self, query: str, index: int, run: ResearchRun, section: str | None = None) -> dspy.Prediction:
        if self.chooser is not None:
            strategy, reason = self.chooser.choose(query, section)
            chosen = dspy.Prediction(strategy=strategy, reason=reason)
        else:
            chosen = run.calls("supervise", self.predict,
                               lambda: dspy.Prediction(strategy="hybrid", reason="fallback"), step=index, query=query)
        run.event("strategy", f"{chosen.strategy} ({chosen.reason})")
        return chosen
