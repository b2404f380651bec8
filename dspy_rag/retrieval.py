"""Recall over the index: vector (Chroma), keyword (BM25) and hybrid (Reciprocal Rank Fusion)."""

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from dspy_rag.index import Hit, Index
from dspy_rag.sections import match_sections

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
    def from_hit(cls, hit: Hit) -> "Passage":
        chunk = hit.chunk
        return cls(chunk.id, chunk.text, chunk.source, chunk.section, hit.score)


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], k: int = 60) -> list[tuple[str, float]]:
    """Fuse ranked id lists: score(d) = sum over lists of 1 / (k + rank of d), ranks counted from 1."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))


def content_key(text: str) -> str:
    """Identical text under different ids (a file ingested twice, a page syndicated) counts once."""
    return hashlib.sha256(" ".join(text.lower().split()).encode()).hexdigest()


def fuse(rankings: Sequence[Sequence[Passage]], k: int = 60) -> list[Passage]:
    """One ranking from several: kept as is when alone, else by RRF; duplicate text kept once, at its best."""
    if len(rankings) == 1:
        passages = list(rankings[0])
    else:
        by_id = {p.id: p for ranking in rankings for p in ranking}
        fused = reciprocal_rank_fusion([[p.id for p in ranking] for ranking in rankings], k)
        passages = [replace(by_id[i], score=score) for i, score in fused]
    unique: dict[str, Passage] = {}
    for passage in passages:
        unique.setdefault(content_key(passage.text), passage)
    return list(unique.values())


def interleave(rankings: Sequence[Sequence[Passage]]) -> list[Passage]:
    """Take the rankings' first items in turn, then their second ones, and so on; an id is kept once.

    Unlike RRF, a passage found by two rankings does not outrank the best of one, so a guess (such as a
    planner's section) can add candidates without pushing the open ranking's best ones out.
    """
    merged: dict[str, Passage] = {}
    for rank in range(max((len(r) for r in rankings), default=0)):
        for ranking in rankings:
            if rank < len(ranking):
                merged.setdefault(ranking[rank].id, ranking[rank])
    return list(merged.values())


class Retriever:
    """Recall for one step: one or several queries, one strategy, an optional section filter."""

    def __init__(self, index: Index, top_k: int = 20, rrf_k: int = 60) -> None:
        self.index = index
        self.top_k = top_k
        self.rrf_k = rrf_k

    def _rankings(self, query: str, strategy: Strategy, sections: list[str]) -> list[list[Passage]]:
        rankings = []
        if strategy in ("vector", "hybrid"):
            rankings.append(self.index.vector_search(query, self.top_k, sections))
        if strategy in ("keyword", "hybrid"):
            rankings.append(self.index.keyword_search(query, self.top_k, sections))
        return [[Passage.from_hit(h) for h in ranking] for ranking in rankings]

    def search(self, query: str | Sequence[str], strategy: Strategy = "hybrid", section: str | None = None
               ) -> list[Passage]:
        """The top_k passages; several rankings (hybrid, several queries) are fused by RRF.

        A section the index does not know is ignored rather than returning nothing.
        """
        queries = [query] if isinstance(query, str) else list(query)
        sections = match_sections(section, self.index.section_titles) if section else []
        rankings = [r for q in queries for r in self._rankings(q, strategy, sections)]
        return fuse(rankings, self.rrf_k)[: self.top_k]
