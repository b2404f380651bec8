"""DSPy programs (the baseline and, later, the deep-thinking loop) and the tools they call."""

from dspy_rag.pipelines.baseline import BaselineRAG

__all__ = ["BaselineRAG"]
