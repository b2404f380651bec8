"""dspy-rag: a deep-thinking research assistant over your documents and the web, as a DSPy program."""

__version__ = "0.1.0"
