"""The persisted keyword index: BM25 postings in the catalog's database, kept up to date commit by commit.

A term's postings are packed arrays (chunk numbers, term frequencies, chunk lengths) in a few blocks: a commit
appends one block per term it holds, and merges a term's newest blocks while the newer ones hold at least half
as many postings as the one before (the logarithmic method) and the result stays below SEALED, so a posting is
rewritten O(log n) times in all, a commit rewrites at most SEALED postings of a term, and a term has O(log n)
blocks plus one per SEALED postings. A removed chunk is listed as dead, its term counts and the corpus totals
corrected at once, and its postings dropped when their block is next merged (a sealed block keeps them, masked). A query reads only its own terms' blocks and scores them
with numpy, rank-bm25's formula and Lucene's idf (dspy_rag.bm25): a reader never builds anything.
"""

import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from dspy_rag.bm25 import K1, B, lucene_idf

SCHEMA = """
CREATE TABLE terms (id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE, documents INTEGER NOT NULL) STRICT;
CREATE TABLE postings (term INTEGER NOT NULL, block INTEGER NOT NULL, size INTEGER NOT NULL, chunks BLOB NOT NULL,
                       frequencies BLOB NOT NULL, lengths BLOB NOT NULL, PRIMARY KEY (term, block)) STRICT, WITHOUT ROWID;
CREATE TABLE dead (chunk INTEGER PRIMARY KEY) STRICT;
"""
NUMBER = np.int32
SEALED = 1 << 16  # postings in a block that is merged no more: no commit rewrites more than this of a term
Block = tuple[np.ndarray, np.ndarray, np.ndarray]  # chunk numbers, term frequencies, chunk lengths


def marks(count: int) -> str:
    """Placeholders for `count` bound values."""
    return ", ".join("?" * count)


def _meta(db: sqlite3.Connection, key: str) -> int:
    row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else 0


def _set_meta(db: sqlite3.Connection, **values: int) -> None:
    db.executemany("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                   values.items())


def _term_ids(db: sqlite3.Connection, terms: list[str]) -> dict[str, int]:
    ids: dict[str, int] = {}
    for start in range(0, len(terms), 10_000):  # below SQLite's limit on bound parameters
        part = terms[start : start + 10_000]
        ids.update(db.execute(f"SELECT term, id FROM terms WHERE term IN ({marks(len(part))})", part))
    return ids


def _counted(chunks: Iterable[tuple[int, Sequence[str]]]) -> tuple[list[tuple[int, Counter[str], int]], Counter[str]]:
    counted = [(number, Counter(tokens), len(tokens)) for number, tokens in chunks]
    return counted, Counter(term for _, counts, _ in counted for term in counts)


def _pack(block: Block) -> tuple[int, bytes, bytes, bytes]:
    return len(block[0]), *(array.astype(NUMBER).tobytes() for array in block)


def _unpack(chunks: bytes, frequencies: bytes, lengths: bytes) -> Block:
    return np.frombuffer(chunks, NUMBER), np.frombuffer(frequencies, NUMBER), np.frombuffer(lengths, NUMBER)


def add(db: sqlite3.Connection, chunks: Iterable[tuple[int, Sequence[str]]]) -> None:
    """Index chunks, given as (chunk number, tokens), as one new block per term."""
    counted, documents = _counted(chunks)
    if not counted:
        return
    db.executemany("INSERT INTO terms (term, documents) VALUES (?, ?) "
                   "ON CONFLICT (term) DO UPDATE SET documents = documents + excluded.documents", documents.items())
    ids = _term_ids(db, list(documents))
    rows: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for number, counts, length in counted:
        for term, frequency in counts.items():
            rows[ids[term]].append((number, frequency, length))
    block = _meta(db, "blocks") + 1
    db.executemany("INSERT INTO postings VALUES (?, ?, ?, ?, ?, ?)",
                   ((term, block, *_pack(tuple(np.array(rows[term]).T))) for term in rows))
    _set_meta(db, blocks=block, chunk_count=_meta(db, "chunk_count") + len(counted),
              token_count=_meta(db, "token_count") + sum(length for *_, length in counted))
    terms, dead = list(rows), _dead(db)
    for start in range(0, len(terms), 10_000):
        part = terms[start : start + 10_000]
        sizes: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for term, number, size in db.execute(
                f"SELECT term, block, size FROM postings WHERE term IN ({marks(len(part))}) ORDER BY term, block", part):
            sizes[term].append((number, size))
        for term, blocks in sizes.items():
            _merge(db, term, blocks, dead)


def _dead(db: sqlite3.Connection) -> np.ndarray:
    return np.fromiter((n for (n,) in db.execute("SELECT chunk FROM dead")), NUMBER)


def _merge(db: sqlite3.Connection, term: int, sizes: list[tuple[int, int]], dead: np.ndarray) -> None:
    """Merge the term's newest blocks, given as (block, size) oldest first, while together they hold at least half
    as many postings as the one before; dead chunks are dropped."""
    merged, newer = 1, sizes[-1][1]
    while merged < len(sizes) and 2 * newer >= (older := sizes[-merged - 1][1]) and newer + older <= SEALED:
        merged, newer = merged + 1, newer + older
    if merged == 1:
        return
    blocks = [block for block, _ in sizes[-merged:]]
    parts = [_unpack(*row) for row in db.execute(
        f"SELECT chunks, frequencies, lengths FROM postings WHERE term = ? AND block IN ({marks(merged)}) "
        "ORDER BY block", (term, *blocks))]
    joined = tuple(np.concatenate(arrays) for arrays in zip(*parts, strict=True))
    alive = ~np.isin(joined[0], dead)
    db.execute(f"DELETE FROM postings WHERE term = ? AND block IN ({marks(merged)})", (term, *blocks))
    if alive.any():
        db.execute("INSERT INTO postings VALUES (?, ?, ?, ?, ?, ?)",
                   (term, blocks[-1], *_pack(tuple(array[alive] for array in joined))))


def remove(db: sqlite3.Connection, chunks: Iterable[tuple[int, Sequence[str]]]) -> None:
    """Drop chunks, given as (chunk number, tokens) as they were added: listed as dead, counts corrected."""
    counted, documents = _counted(chunks)
    ids = _term_ids(db, list(documents))
    db.executemany("INSERT INTO dead (chunk) VALUES (?)", ((number,) for number, *_ in counted))
    db.executemany("UPDATE terms SET documents = documents - ? WHERE id = ?",
                   ((count, ids[term]) for term, count in documents.items()))
    _set_meta(db, chunk_count=_meta(db, "chunk_count") - len(counted),
              token_count=_meta(db, "token_count") - sum(length for *_, length in counted))


def search(db: sqlite3.Connection, tokens: Sequence[str], k: int, allowed: np.ndarray | None = None
           ) -> list[tuple[int, float]]:
    """The k best (chunk number, BM25 score) for the query's tokens, best first; ties by chunk number. A token
    repeated in the query counts as often as it is repeated, as in rank-bm25; with `allowed`, only those chunk
    numbers are searched."""
    chunk_count, token_count = _meta(db, "chunk_count"), _meta(db, "token_count")
    counts = Counter(tokens)
    if not chunk_count or not counts:
        return []
    average = token_count / chunk_count
    numbers, contributions = [], []
    for term_id, term, documents in db.execute(
            f"SELECT id, term, documents FROM terms WHERE documents > 0 AND term IN ({marks(len(counts))})",
            list(counts)).fetchall():
        weight = lucene_idf(chunk_count, documents) * counts[term]
        for row in db.execute("SELECT chunks, frequencies, lengths FROM postings WHERE term = ?", (term_id,)):
            chunks, frequencies, lengths = _unpack(*row)
            numbers.append(chunks)
            contributions.append(weight * (frequencies * (K1 + 1)
                                           / (frequencies + K1 * (1 - B + B * lengths / average))))
    if not numbers:
        return []
    chunks = np.concatenate(numbers)
    scores = np.bincount(chunks, weights=np.concatenate(contributions))
    if len(dead := _dead(db)):
        scores[dead[dead < len(scores)]] = 0.0
    if allowed is not None:
        inside = np.zeros(len(scores), bool)
        inside[allowed[allowed < len(scores)]] = True
        scores[~inside] = 0.0
    candidates = np.flatnonzero(scores > 0)
    if len(candidates) > k:  # those at least as good as the k-th best, ties included
        candidates = candidates[scores[candidates] >= np.partition(scores[candidates], -k)[-k]]
    best = candidates[np.lexsort((candidates, -scores[candidates]))][:k]
    return [(int(n), float(scores[n])) for n in best]
