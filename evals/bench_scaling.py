"""Scaling benchmark: the real index (the SQLite catalog with its keyword postings, embedded Chroma) on synthetic
corpora far larger than the datasets, to see where time, disk and memory go.

    dspy-rag bench retrieval --scaling 10000,100000 [--json out.json]

Chunks are Zipf-distributed ~120-word texts with random unit vectors (no embedding model: two cores embed ~25
chunks a second), committed as files of FILE_CHUNKS chunks, one transaction each, as a folder ingest commits
them. Per size: the build (catalog, vectors) and its peak memory, the disk, what each commit wrote, query
latency per strategy through `Index`, and the start-up of a reader process (process start to its first
keyword and vector retrieval, no model loaded).
"""

import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np

from dspy_rag.catalog import Catalog
from dspy_rag.chunking import Chunk
from dspy_rag.config import Config, load_config
from dspy_rag.errors import UserError
from dspy_rag.evals.bench_retrieval import latency_ms
from dspy_rag.index import Index, ProgressFn
from dspy_rag.retrieval import reciprocal_rank_fusion

VOCABULARY_SIZE = 5000
DIMENSIONS = 384
WORDS_PER_CHUNK = 120
QUERY_WORDS = 8
CHROMA_BATCH = 5000
SCALING_TOP_K = 20
FILE_CHUNKS = 1000
PAGE = 4096  # SQLite's page size, the unit a commit writes

# A reader process: import the CLI and open the index as `ask` does, then one keyword and one vector retrieval.
# Its CPU time tells its own cost from the wait for a shared machine's cores. Its peak memory is read from /proc
# (VmHWM): a child's getrusage maximum starts from its parent's on Linux.
READER = """
import json, os, re, sys, time
from pathlib import Path
import numpy as np
import dspy_rag.cli  # what `ask` imports before it opens the index: every command's module
from dspy_rag.config import load_config
from dspy_rag.index import Index, ProgressFn
index = Index(load_config(overrides={"index.path": sys.argv[1]}, environ={})).require()
index.keyword_search(sys.argv[2], 20)
index.vector_search_by(np.frombuffer(bytes.fromhex(sys.argv[3]), np.float32), 20)
peak_kb = int(re.search(r"VmHWM:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1))
used = os.times()
print(json.dumps({"done": time.time(), "cpu_seconds": used.user + used.system, "peak_rss_mb": peak_kb / 1024}))
"""


def vocabulary(rng: np.random.Generator) -> np.ndarray:
    """5,000 distinct pseudo-words of 4-9 letters: no stopwords, so every word survives the tokenizer."""
    words: set[str] = set()
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    while len(words) < VOCABULARY_SIZE:
        words.add("".join(rng.choice(letters, size=int(rng.integers(4, 10)))))
    return np.array(sorted(words))


def zipf_weights(size: int) -> np.ndarray:
    """Word frequencies of natural text fall off as 1/rank, giving BM25 a real corpus's mix of common and rare terms."""
    weights = 1.0 / np.arange(1, size + 1)
    return weights / weights.sum()


def random_texts(rng: np.random.Generator, words: np.ndarray, count: int, length: int) -> list[str]:
    """`count` texts of length ± 20 % words, drawn in one go (a draw per text is slow at 100,000 texts)."""
    lengths = rng.integers(int(length * 0.8), int(length * 1.2) + 1, size=count)
    drawn = rng.choice(words, size=int(lengths.sum()), p=zipf_weights(len(words)))
    return [" ".join(part) for part in np.split(drawn, np.cumsum(lengths)[:-1])]


def unit_vectors(rng: np.random.Generator, count: int) -> np.ndarray:
    vectors = rng.standard_normal((count, DIMENSIONS)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def folder_mb(folder: Path, pattern: str = "**/*") -> float:
    return round(sum(f.stat().st_size for f in folder.glob(pattern) if f.is_file()) / 1e6, 1)


def committed_bytes(catalog: Catalog) -> int:
    """What the last commit wrote (its pages in the write-ahead log, which is then emptied for the next one)."""
    with closing(sqlite3.connect(catalog.path)) as db:
        frames = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # which reports no frames: the log is emptied first
        return frames * PAGE


def no_progress(stage: str, done: int, total: int) -> None:
    """The benchmark's default `ProgressFn`: silent."""


def build_catalog(config: Config, texts: list[str], progress: ProgressFn = no_progress) -> list[int]:
    """Commit the texts as files of FILE_CHUNKS chunks, one transaction each; the bytes each commit wrote."""
    catalog = Catalog(config.index.path, config.embedding.model, writer=True)
    catalog.set_collection(config.index.collection)
    written = []
    for start in range(0, len(texts), FILE_CHUNKS):
        source = f"file-{start // FILE_CHUNKS:05d}.txt"
        chunks = [Chunk(f"chunk-{n:07d}", source, "Notes", 0, len(texts[n]), texts[n])
                  for n in range(start, min(start + FILE_CHUNKS, len(texts)))]
        with catalog.transaction():
            catalog.replace(source, f"sha-{start}", "text", chunks)
        written.append(committed_bytes(catalog))
        progress(f"{len(texts):,} chunks: catalog", start + len(chunks), len(texts))
    catalog.close()
    return written


def fill_vectors(index: Index, vectors: np.ndarray, progress: ProgressFn = no_progress) -> None:
    """The index's own Chroma collection, filled in Chroma-sized batches under the catalog's chunk ids."""
    for start in range(0, len(vectors), CHROMA_BATCH):
        part = vectors[start : start + CHROMA_BATCH]
        index.collection.add(ids=[f"chunk-{n:07d}" for n in range(start, start + len(part))], embeddings=part)
        progress(f"{len(vectors):,} chunks: vectors", start + len(part), len(vectors))


def timed(build: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    built = build()
    return built, round(time.perf_counter() - started, 2)


def time_queries(search: Callable[[int], Any], queries: int) -> dict[str, float]:
    """Latency of `queries` searches after one untimed warm-up search."""
    search(0)
    seconds = []
    for n in range(queries):
        started = time.perf_counter()
        search(n)
        seconds.append(time.perf_counter() - started)
    return latency_ms(seconds)


def reader_start(root: Path, query: str, vector: np.ndarray) -> dict[str, float]:
    """A new process opening the index for reading, to its first retrieval: seconds, CPU seconds, peak memory."""
    started = time.time()
    result = subprocess.run([sys.executable, "-c", READER, str(root), query, vector.astype(np.float32).tobytes().hex()],
                            capture_output=True, text=True, check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    return {"seconds": round(figures["done"] - started, 2), "cpu_seconds": round(figures["cpu_seconds"], 2),
            "peak_rss_mb": round(figures["peak_rss_mb"])}


def hybrid_ids(index: Index, vector: np.ndarray, query: str) -> list[str]:
    """Hybrid as the retriever fuses it: vector and keyword rankings by RRF."""
    rankings = [[h.chunk.id for h in index.vector_search_by(vector, SCALING_TOP_K)],
                [h.chunk.id for h in index.keyword_search(query, SCALING_TOP_K)]]
    return [item for item, _ in reciprocal_rank_fusion(rankings)[:SCALING_TOP_K]]


def scale_once(rng: np.random.Generator, words: np.ndarray, size: int, queries: int,
               progress: ProgressFn = no_progress) -> dict[str, Any]:
    vectors = unit_vectors(rng, size)
    texts = random_texts(rng, words, size, WORDS_PER_CHUNK)
    query_vectors = unit_vectors(rng, queries)
    query_texts = random_texts(rng, words, queries, QUERY_WORDS)
    with tempfile.TemporaryDirectory(prefix="dspy-rag-scaling-") as folder:
        config = load_config(overrides={"index.path": Path(folder) / "index"}, environ={})
        written, keyword_build = timed(lambda: build_catalog(config, texts, progress))
        _, vector_build = timed(lambda: fill_vectors(Index(config), vectors, progress))
        build_peak = peak_rss_mb()
        progress(f"{size:,} chunks: reader start and queries", 0, 0)
        start = reader_start(config.index.path, query_texts[0], query_vectors[0])
        reader = Index(config).require()
        latencies = {
            "vector_ms": time_queries(lambda n: reader.vector_search_by(query_vectors[n], SCALING_TOP_K), queries),
            "keyword_ms": time_queries(lambda n: reader.keyword_search(query_texts[n], SCALING_TOP_K), queries),
            "hybrid_ms": time_queries(lambda n: hybrid_ids(reader, query_vectors[n], query_texts[n]), queries),
        }
        disk = {"catalog": folder_mb(config.index.path, "catalog.sqlite3*"),
                "chroma": folder_mb(config.index.path / "chroma")}
    return {"chunks": size, "queries": queries, "top_k": SCALING_TOP_K, "file_chunks": FILE_CHUNKS,
            "build_seconds": {"keyword": keyword_build, "vector": vector_build},
            "build_peak_rss_mb": round(build_peak), "disk_mb": disk,
            "commit_kb": {"first_file": round(written[0] / 1024), "median": round(float(np.median(written)) / 1024),
                          "max": round(max(written) / 1024), "last_file": round(written[-1] / 1024)},
            "start": start, **latencies}


def scaling(sizes: list[int], queries: int = 50, progress: ProgressFn = no_progress) -> list[dict[str, Any]]:
    """The figures of each size, smallest first (the build's peak memory is the process's, so far)."""
    if queries < 1 or any(size < SCALING_TOP_K for size in sizes):
        raise UserError(f"scaling needs at least one query and at least {SCALING_TOP_K} chunks per corpus")
    rng = np.random.default_rng(0)
    words = vocabulary(rng)
    return [scale_once(rng, words, size, queries, progress) for size in sorted(sizes)]


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise UserError(f"--scaling takes chunk counts separated by commas, e.g. 10000,100000, not '{text}'") from exc
    if not sizes or min(sizes) < SCALING_TOP_K:
        raise UserError(f"--scaling sizes must be at least {SCALING_TOP_K} chunks, e.g. 10000,100000")
    return sizes
