"""Build a program by name over an index and web tool, as `ask`, `compile` and the benchmarks need it."""

from collections.abc import Callable
from typing import Literal

import dspy

from dspy_rag.config import Config
from dspy_rag.index import Index
from dspy_rag.pipelines.baseline import BaselineRAG
from dspy_rag.pipelines.deep import DeepResearch
from dspy_rag.pipelines.evidence import evidence_chars
from dspy_rag.pipelines.learned_policy import LearnedPolicy
from dspy_rag.pipelines.plain import PlainRAG
from dspy_rag.pipelines.policy import PolicyMode
from dspy_rag.reranker import load_reranker
from dspy_rag.retrieval import Retriever
from dspy_rag.web import WebSearch

Pipeline = Literal["deep", "baseline", "plain"]


def build_program(pipeline: Pipeline, settings: Config, index: Index, web: WebSearch | None,
                  policy: PolicyMode = "llm", on_event: Callable[[str, str], None] = lambda kind, text: None,
                  learned: LearnedPolicy | None = None) -> dspy.Module:
    retriever = Retriever(index, settings.retrieval.top_k, settings.retrieval.rrf_k)
    if pipeline == "plain":
        return PlainRAG(retriever)
    if pipeline == "baseline":
        return BaselineRAG(retriever, settings.retrieval.top_n, web, load_reranker(settings))
    return DeepResearch(retriever, load_reranker(settings), web, settings.retrieval.top_n, settings.budgets,
                        policy, on_event=on_event, learned=learned,
                        evidence_chars=evidence_chars(settings.lm.context_window), guards=settings.guards,
                        roles=settings.roles)
