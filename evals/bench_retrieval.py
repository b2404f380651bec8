"""Retrieval benchmark: recall and latency of vector, keyword, hybrid (and hybrid+rerank) on multi-hop sets.

    dspy-rag bench retrieval --questions ../shared/data/musique/questions.json \
        --corpus ../shared/data/musique/corpus.json [--limit N] [--no-reranker] [--json out.json]
    dspy-rag bench retrieval --scaling 10000,100000

Each corpus passage becomes one document whose source is the passage id, so a retrieved chunk names the
passage it came from and recall is counted against the dataset's gold ids. `--scaling` times the
real index on synthetic corpora far larger than the datasets (dspy_rag.evals.bench_scaling).
"""

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dspy_rag import paths
from dspy_rag.config import Config, load_config
from dspy_rag.errors import UserError
from dspy_rag.index import ProgressFn
from dspy_rag.retrieval import Passage, Retriever, Strategy
from dspy_rag.trainsets.corpus_index import build_index
from dspy_rag.trainsets.formats import Question, load_corpus, load_questions

if TYPE_CHECKING:
    from dspy_rag.reranker import Reranker

STRATEGIES: tuple[Strategy, ...] = ("vector", "keyword", "hybrid")
RERANKED = "hybrid+rerank"
# A reranker that also bridges (see dspy_rag.reranker.bridged) is scored by halves too: what each adds.
NO_BRIDGE = "unbridged"
BRIDGE_ONLY = "hybrid+bridge"
RERANK_TOP_N = 10
CUTOFFS = (2, 5, 10)
ALL_GOLD_K = 10

# --- metrics -----------------------------------------------------------------------------------------


def distinct(ids: Sequence[str]) -> list[str]:
    """Ids in first-seen order: a long passage split into several chunks counts once, at its best rank."""
    return list(dict.fromkeys(ids))


def recall_at(ranked_ids: list[str], gold: set[str], k: int) -> float:
    """Share of the gold passages among the first k distinct ranked ids."""
    if not gold:
        raise ValueError("recall needs at least one gold id")
    return len(gold.intersection(distinct(ranked_ids)[:k])) / len(gold)


def all_gold_at(ranked_ids: list[str], gold: set[str], k: int = ALL_GOLD_K) -> bool:
    """Multi-hop questions need every hop: True only when all gold passages are in the first k."""
    return recall_at(ranked_ids, gold, k) == 1.0


def latency_ms(seconds: Sequence[float]) -> dict[str, float]:
    """Median and p90 in milliseconds: single queries are noisy on a shared machine, the tail matters."""
    values = np.asarray(seconds, dtype=float) * 1000.0
    return {"median": round(float(np.median(values)), 2), "p90": round(float(np.percentile(values, 90)), 2)}


@dataclass
class StrategyScores:
    """Per-question figures of one strategy, summarised at the end."""

    recalls: dict[int, list[float]] = field(default_factory=lambda: {k: [] for k in CUTOFFS})
    all_gold: list[bool] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    rerank_seconds: list[float] = field(default_factory=list)

    def add(self, ranked_ids: list[str], gold: set[str], seconds: float, rerank_seconds: float | None = None) -> None:
        for k in CUTOFFS:
            self.recalls[k].append(recall_at(ranked_ids, gold, k))
        self.all_gold.append(all_gold_at(ranked_ids, gold))
        self.seconds.append(seconds)
        if rerank_seconds is not None:
            self.rerank_seconds.append(rerank_seconds)

    def summary(self) -> dict[str, Any]:
        row: dict[str, Any] = {f"recall@{k}": round(statistics.fmean(v), 4) for k, v in self.recalls.items()}
        row[f"all_in_top{ALL_GOLD_K}"] = round(statistics.fmean(self.all_gold), 4)
        row["latency_ms"] = latency_ms(self.seconds)
        if self.rerank_seconds:
            row["rerank_ms"] = latency_ms(self.rerank_seconds)
        return row


# --- dataset run -------------------------------------------------------------------------------------


def bench_config(work_dir: Path, top_k: int) -> Config:
    """A scratch configuration: the index lives in work_dir and the user's environment does not leak in."""
    return load_config(overrides={"index.path": work_dir, "retrieval.top_k": top_k}, environ={})


def gold_questions(questions: list[Question], limit: int | None, only: set[str] | None = None) -> list[Question]:
    """Questions that name gold passages (recall is undefined without them), optionally only the ids in
    `only` (e.g. those a reranker was not trained on), the first `limit` of them."""
    usable = [q for q in questions if q.gold_passages and (only is None or q.id in only)]
    return usable[:limit] if limit is not None else usable


def timed_search(retriever: Retriever, query: str, strategy: Strategy) -> tuple[list[Passage], float]:
    started = time.perf_counter()
    passages = retriever.search(query, strategy)
    return passages, time.perf_counter() - started


def timed_rerank(reranker: "Reranker", query: str, passages: list[Passage]) -> tuple[list[Passage], float]:
    started = time.perf_counter()
    reranked = reranker.rerank(query, passages, RERANK_TOP_N)
    return reranked, time.perf_counter() - started


def warm_up(retriever: Retriever, query: str) -> None:
    """Load the embedding model and build BM25 before timing, so the first query is not billed for them."""
    for strategy in STRATEGIES:
        retriever.search(query, strategy)


def bridges(reranker: "Reranker | None") -> bool:
    return bool(getattr(reranker, "bridge", False))


def score_questions(retriever: Retriever, questions: list[Question], reranker: "Reranker | None"
                    ) -> dict[str, StrategyScores]:
    """Every strategy on every question; the reranker reorders the very hybrid ranking that was timed."""
    extra = [RERANKED, *([NO_BRIDGE, BRIDGE_ONLY] if bridges(reranker) else [])] if reranker else []
    scores = {name: StrategyScores() for name in (*STRATEGIES, *extra)}
    warm_up(retriever, questions[0].question)
    for question in questions:
        gold = set(question.gold_passages)
        for strategy in STRATEGIES:
            passages, seconds = timed_search(retriever, question.question, strategy)
            scores[strategy].add([p.source for p in passages], gold, seconds)
            if strategy == "hybrid" and reranker is not None:
                reranked, rerank_seconds = timed_rerank(reranker, question.question, passages)
                scores[RERANKED].add([p.source for p in reranked], gold, seconds + rerank_seconds, rerank_seconds)
                if bridges(reranker):  # the halves, untimed: their cost is the reranker's above
                    from dspy_rag.reranker import bridged

                    unbridged = reranker.reorder(question.question, passages, bridge=False)[:RERANK_TOP_N]
                    scores[NO_BRIDGE].add([p.source for p in unbridged], gold, seconds + rerank_seconds)
                    scores[BRIDGE_ONLY].add([p.source for p in bridged(passages)[:RERANK_TOP_N]], gold, seconds)
    return scores


def best_single(strategies: dict[str, dict[str, Any]]) -> str:
    """The single strategy with the best recall@5 (ties go to the simpler one, listed first)."""
    return max(STRATEGIES, key=lambda name: strategies[name]["recall@5"])


def gain(summaries: dict[str, dict[str, Any]], baseline: str) -> float:
    return round(summaries[RERANKED]["recall@5"] - summaries[baseline]["recall@5"], 4)


def run(questions_path: Path, corpus_path: Path, work_dir: Path, reranker: "Reranker | None" = None,
        top_k: int = 20, limit: int | None = None, progress: ProgressFn = lambda *_: None,
        only: set[str] | None = None) -> dict[str, Any]:
    """Recall@2/5/10, all-gold-in-top-10 and latency of each strategy over the questions with gold passages."""
    kind, questions = load_questions(questions_path)
    passages = load_corpus(corpus_path)
    usable = gold_questions(questions, limit, only)
    if not usable:
        raise UserError(f"{questions_path} has no questions with gold passages to score")
    config = bench_config(work_dir, top_k)
    started = time.perf_counter()
    index = build_index(config, passages, progress)
    ingest_seconds = time.perf_counter() - started
    retriever = Retriever(index, config.retrieval.top_k, config.retrieval.rrf_k)
    summaries = {name: s.summary() for name, s in score_questions(retriever, usable, reranker).items()}
    corpus_ids = {p.id for p in passages}
    best = best_single(summaries)
    return {
        "format": kind,
        "questions": len(usable),
        "questions_in_file": len(questions),
        "corpus_passages": len(corpus_ids),
        "chunks": index.chunk_count,
        "gold_missing_from_corpus": len({g for q in usable for g in q.gold_passages} - corpus_ids),
        "top_k": top_k,
        "rerank_top_n": RERANK_TOP_N if reranker else None,
        "reranker": reranker.name if reranker else None,
        "reranker_settings": reranker.settings if reranker else None,
        "index": str(index.root),
        "index_seconds": round(ingest_seconds, 2),
        "strategies": summaries,
        "best_single": best,
        "rerank_gain_recall@5": gain(summaries, best) if reranker else None,
        "rerank_gain_over_hybrid_recall@5": gain(summaries, "hybrid") if reranker else None,
    }


# --- command line ------------------------------------------------------------------------------------

def require_file(path: Path | None, option: str) -> Path:
    if path is None:
        raise UserError(f"pass {option} FILE (or only --scaling for the synthetic latency run)")
    if not paths.named(path, option).is_file():
        raise UserError(f"{option} {path} does not exist or is not a file; check the path")
    return path


def chosen_reranker(use: bool, config: Config) -> "Reranker | None":
    if not use:
        return None
    from dspy_rag.reranker import load_reranker

    return load_reranker(config)


def held_out_ids(reranker: "Reranker | None") -> set[str]:
    """The questions a trained reranker never saw, from its training manifest."""
    from dspy_rag.reranker import training_manifest

    if reranker is None or not (Path(reranker.name) / "training.json").is_file():
        raise UserError("--held-out-only needs a reranker trained by `dspy-rag train-reranker`")
    return set(training_manifest(Path(reranker.name))["held_out_question_ids"])
