"""Typed DSPy signatures, one role each; each docstring is that role's starting instruction."""

from dspy_rag.signatures.answer import AnswerFromPassages

__all__ = ["AnswerFromPassages"]
