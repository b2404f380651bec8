"""The reflection role: what a step found, as one sentence for the research history."""

import dspy

from dspy_rag.pipelines.distiller import first_sentence
from dspy_rag.pipelines.research_run import ResearchRun
from dspy_rag.signatures import Reflect


class Reflection(dspy.Module):
    """A step's finding from its notes. Switched off (`roles.reflection: false`), or when its output never parses,
    the finding is the notes' first sentence, with no LM call."""

    def __init__(self, enabled: bool = True) -> None:
        super().__init__()
        self.enabled = enabled
        self.predict = dspy.Predict(Reflect)

    def forward(self, sub_question: str, context: str, index: int, run: ResearchRun) -> str:
        def lead() -> dspy.Prediction:
            return dspy.Prediction(finding=first_sentence(context))

        reflected = (run.calls("reflect", self.predict, lead, step=index, sub_question=sub_question, context=context)
                     if self.enabled else lead())
        run.event("finding", reflected.finding)
        return reflected.finding
