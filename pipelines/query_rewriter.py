"""The query rewriter role: a step's sub-question as a search query, checked by the query_guard."""

import dspy

from dspy_rag.pipelines.guards import query_for
from dspy_rag.pipelines.research_run import ResearchRun
from dspy_rag.signatures import RewriteQuery, Step


class QueryRewriter(dspy.Module):
    """Writes the search query of a step from its sub-question, keywords and the findings so far."""

    def __init__(self, guarded: bool = True) -> None:
        super().__init__()
        self.guarded = guarded
        self.predict = dspy.Predict(RewriteQuery)

    def forward(self, step: Step, index: int, findings: list[str], run: ResearchRun) -> str:
        rewritten = run.calls("rewrite", self.predict, lambda: dspy.Prediction(query=step.sub_question), step=index,
                              sub_question=step.sub_question, keywords=step.keywords, findings=findings)
        if not self.guarded:
            return " ".join(rewritten.query.split()) or step.sub_question
        query, fired = query_for(rewritten.query, step.sub_question, findings)
        if fired:
            run.guarded(fired, index)
        return query
