"""DSPy programs (the single-shot baseline and the deep-thinking loop) and the tools they call."""

from dspy_rag.pipelines.baseline import BaselineRAG
from dspy_rag.pipelines.deep import DeepResearch

__all__ = ["BaselineRAG", "DeepResearch"]
