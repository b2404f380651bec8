"""The precision stage: a cross-encoder reads query and passage together and keeps the best top_n.

Online, a standard cross-encoder loads by name (cross-encoder/ms-marco-MiniLM-L-6-v2). Offline no package
ships one, so `dspy-rag train-reranker` trains one from the packaged MiniLM (optimizers/train_reranker.py)
into artifacts/rerankers/, which `retrieval.reranker: auto` then picks up.
"""

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import numpy as np

from dspy_rag.config import Config
from dspy_rag.errors import UserError
from dspy_rag.retrieval import Passage

DEFAULT_NAME = "minilm"
MAX_LENGTH = 256


class Reranker(Protocol):
    name: str

    def rerank(self, query: str, passages: list[Passage], top_n: int) -> list[Passage]: ...


class CrossEncoderReranker:
    def __init__(self, name_or_path: str) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(name_or_path)
            self.model = AutoModelForSequenceClassification.from_pretrained(name_or_path, num_labels=1).eval()
        except OSError as exc:
            raise UserError(f"cannot load reranker '{name_or_path}'; offline, train one with "
                            "`dspy-rag train-reranker` or set retrieval.reranker: none") from exc
        self.name = name_or_path

    def scores(self, query: str, texts: list[str], batch_size: int = 16) -> np.ndarray:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        rows = []
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                batch = texts[start : start + batch_size]
                encoded = self.tokenizer([query] * len(batch), batch, truncation="only_second",
                                         max_length=MAX_LENGTH, padding=True, return_tensors="pt")
                rows.append(self.model(**encoded).logits[:, 0].float().numpy())
        return np.concatenate(rows) if rows else np.zeros(0, dtype=np.float32)

    def rerank(self, query: str, passages: list[Passage], top_n: int) -> list[Passage]:
        scores = self.scores(query, [p.text for p in passages])
        order = np.argsort(-scores, kind="stable")[:top_n]
        return [replace(passages[i], score=float(scores[i])) for i in order]


def trained_folder(config: Config, name: str = DEFAULT_NAME) -> Path:
    return config.artifacts.path / "rerankers" / name


def training_manifest(folder: Path) -> dict[str, object]:
    return json.loads((folder / "training.json").read_text(encoding="utf-8"))


def load_reranker(config: Config) -> Reranker | None:
    """`auto`: the reranker trained into artifacts/ if there is one, else none; `none`; or a name or path."""
    choice = config.retrieval.reranker
    if choice == "none":
        return None
    if choice == "auto":
        folder = trained_folder(config)
        return CrossEncoderReranker(str(folder)) if (folder / "training.json").is_file() else None
    return CrossEncoderReranker(choice)
