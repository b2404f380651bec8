"""Recall over the index: vector (Chroma), keyword (BM25) and hybrid (Reciprocal Rank Fusion)."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from dspy_rag.index import Hit, Index

Strategy = Literal["vector", "keyword", "hybrid"]


@dataclass(frozen=True)
class Passage:
    """A retrieved chunk as the pipeline sees it: text, where it came from, and how it ranked."""

    id: str
    text: str
    source: str
    section: str
    score: float

    @classmethod
    def from_hit(cls, hit: Hit, score: float | None = None) -> "Passage":
        chunk = hit.chunk
        return cls(chunk.id, chunk.text, chunk.source, chunk.section, hit.score if score is None else score)


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], k: int = 60) -> list[tuple[str, float]]:
    """Fuse ranked id lists: score(d) = sum over lists of 1 / (k + rank of d), ranks counted from 1."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))


class Retriever:
    def __init__(self, index: Index, top_k: int = 20, rrf_k: int = 60) -> None:
        self.index = index
        self.top_k = top_k
        self.rrf_k = rrf_k

    def search(self, query: str, strategy: Strategy = "hybrid") -> list[Passage]:
        if strategy == "vector":
            return [Passage.from_hit(h) for h in self.index.vector_search(query, self.top_k)]
        if strategy == "keyword":
            return [Passage.from_hit(h) for h in self.index.keyword_search(query, self.top_k)]
        vector = self.index.vector_search(query, self.top_k)
        keyword = self.index.keyword_search(query, self.top_k)
        by_id = {h.chunk.id: h for h in vector + keyword}
        fused = reciprocal_rank_fusion([[h.chunk.id for h in vector], [h.chunk.id for h in keyword]], self.rrf_k)
        return [Passage.from_hit(by_id[i], score) for i, score in fused[: self.top_k]]
