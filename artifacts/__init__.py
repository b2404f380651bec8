"""The artifacts that ship with dspy-rag as the package data of `dspy_rag.shipped` (see pyproject.toml): the
default compiled program for the local model and the trained reranker. The other folders and the ledger here are
the checkout's own and do not ship."""
