"""The step researcher role: one step of the plan, researched: rewrite, supervise, recall, rerank, distill,
reflect."""

import dspy

from dspy_rag.config import GuardConfig, RoleConfig
from dspy_rag.pipelines.distiller import Distiller
from dspy_rag.pipelines.evidence import reranked
from dspy_rag.pipelines.guards import Fired
from dspy_rag.pipelines.query_rewriter import QueryRewriter
from dspy_rag.pipelines.reflection import Reflection
from dspy_rag.pipelines.research_run import ResearchRun, SharesTools
from dspy_rag.pipelines.retrieval_supervisor import RetrievalSupervisor
from dspy_rag.pipelines.strategy_chooser import StrategyChooser
from dspy_rag.pipelines.trajectory import Scored, StepRecord
from dspy_rag.reranker import Reranker
from dspy_rag.retrieval import Passage, Retriever, Strategy, interleave
from dspy_rag.signatures import Step
from dspy_rag.web import WebSearch, WebSearchError


def sources(passages: list[Passage]) -> str:
    return "; ".join(f"{p.section or p.source} ({p.score:.2f})" for p in passages) or "none"


class StepResearcher(SharesTools, dspy.Module):
    """Researches one step: its query, its passages (the web's, or the documents' by the chosen strategy and the
    step's section), reranked, and what they say about its sub-question."""

    def __init__(self, retriever: Retriever, reranker: Reranker | None, web: WebSearch | None, top_n: int,
                 guards: GuardConfig, roles: RoleConfig, chooser: StrategyChooser | None = None) -> None:
        """`chooser`: the learned policy's search strategy chooser, in place of the supervisor LM's call."""
        super().__init__()
        self.retriever = retriever
        self.reranker = reranker
        self.web = web
        self.top_n = top_n
        self.injection_guard = guards.injection
        self.rewriter = QueryRewriter(guards.query_guard)
        self.supervisor = RetrievalSupervisor(chooser)
        self.distiller = Distiller(roles.distiller)
        self.reflection = Reflection(roles.reflection)

    def forward(self, step: Step, index: int, findings: list[str], run: ResearchRun
                ) -> tuple[StepRecord, list[Passage]]:
        """The step's record and its reranked passages."""
        record = StepRecord(index, step.sub_question, step.tool, step.keywords, step.section, step.justification)
        started = run.calls.elapsed
        run.event("step", f"step {index + 1}: {step.sub_question}")
        record.query = self.rewriter(step=step, index=index, findings=findings, run=run)
        run.event("query", record.query)
        candidates, top, fired = self.rerank(record.query, self.recall(step, record, run))
        for each in fired:
            run.guarded(each, index)
        record.retrieved, record.reranked = [Scored.of(p) for p in candidates], [Scored.of(p) for p in top]
        run.event("sources", sources(top))
        if not top:
            record.context, record.finding = "nothing found", f"Nothing was found for: {step.sub_question}"
        else:
            distilled = self.distiller(sub_question=step.sub_question, passages=top, index=index, run=run)
            record.context, record.used_passages = distilled.context, [p.id for p in distilled.used]
            record.finding = self.reflection(sub_question=step.sub_question, context=distilled.context, index=index,
                                             run=run)
        record.seconds = round(run.calls.elapsed - started, 3)
        return record, top

    def recall(self, step: Step, record: StepRecord, run: ResearchRun) -> list[Passage]:
        """The web's results for a web step (the documents' when the web is off or fails), else the documents' by
        the supervisor's strategy."""
        if step.tool == "search_web":
            if self.web is None:
                record.notes.append("web search is off; searched the documents instead")
            else:
                try:
                    return self.web.search(record.query, self.retriever.top_k)
                except WebSearchError as exc:
                    record.web_error = str(exc)
                    run.event("web", f"web search failed ({exc}); searching the documents instead")
        chosen = self.supervisor(query=record.query, index=record.index, run=run, section=step.section)
        record.strategy, record.strategy_reason = chosen.strategy, chosen.reason
        return self.search_documents(record.query, chosen.strategy, step.section)

    def search_documents(self, query: str, strategy: Strategy, section: str | None) -> list[Passage]:
        """The documents' passages for the query by the strategy, in the step's section when it names one."""
        ranking = self.retriever.search(query, strategy)
        if not section:
            return ranking
        # A wrong section guess must not hide the answer: the section's ranking takes turns with the open one.
        return interleave([ranking, self.retriever.search(query, strategy, section)])[: self.retriever.top_k]

    def rerank(self, query: str, candidates: list[Passage]) -> tuple[list[Passage], list[Passage], list[Fired]]:
        """The candidates made inert by the injection guard (when on), the top_n the step reads, the firings."""
        return reranked(query, candidates, self.reranker, self.top_n, self.injection_guard)
