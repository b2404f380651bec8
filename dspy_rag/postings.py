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


def _contributions(weight: float, frequencies: np.ndarray, lengths: np.ndarray, average: float) -> np.ndarray:
    """rank-bm25's term score, the term's weight (idf times its count in the query) included."""
    return weight * (frequencies * (K1 + 1) / (frequencies + K1 * (1 - B + B * lengths / average)))


def _blocks(db: sqlite3.Connection, term: int) -> list[Block]:
    """A term's postings blocks, oldest first: chunk numbers ascend within a block and from one to the next, as
    chunk numbers were assigned."""
    return [_unpack(*row) for row in db.execute(
        "SELECT chunks, frequencies, lengths FROM postings WHERE term = ? ORDER BY block", (term,))]


def _kth(scores: np.ndarray, k: int) -> float:
    """The k-th best of `scores`, or 0 when there are fewer."""
    return float(np.partition(scores, -k)[-k]) if len(scores) >= k else 0.0


def _searched(size: int, dead: np.ndarray, allowed: np.ndarray | None) -> np.ndarray | None:
    """Which of the chunk numbers below `size` a search may return, or None for all: not the dead, and with
    `allowed`, only those."""
    if not len(dead) and allowed is None:
        return None
    searched = np.ones(size, bool)
    if allowed is not None:
        searched[:] = False
        searched[allowed[allowed < size]] = True
    searched[dead[dead < size]] = False
    return searched


def search(db: sqlite3.Connection, tokens: Sequence[str], k: int, allowed: np.ndarray | None = None
           ) -> list[tuple[int, float]]:
    """The k best (chunk number, BM25 score) for the query's tokens, best first; ties by chunk number. A token
    repeated in the query counts as often as it is repeated, as in rank-bm25; with `allowed`, only those chunk
    numbers are searched.

    Exact, but pruned (MaxScore): terms are scored in order of their bound, weight * (K1 + 1), which no chunk's
    score of the term reaches. Once the bounds of the terms left add up to less than the k-th best score so
    far, a chunk none of the scored terms holds cannot make the k best, so the terms left (a query's common
    words, with the most postings and the least weight) are only looked up for the chunks that still can.
    """
    chunk_count, token_count = _meta(db, "chunk_count"), _meta(db, "token_count")
    counts = Counter(tokens)
    if not chunk_count or not counts:
        return []
    average = token_count / chunk_count
    terms = sorted(((lucene_idf(chunk_count, documents) * counts[term], term_id) for term_id, term, documents in
                    db.execute(f"SELECT id, term, documents FROM terms WHERE documents > 0 AND term IN "
                               f"({marks(len(counts))})", list(counts))), reverse=True)
    if not terms:
        return []
    weights, blocks = [weight for weight, _ in terms], [_blocks(db, term) for _, term in terms]
    # With a margin for rounding: a bound must stay above what the floats can sum to.
    left = np.cumsum([weight * (K1 + 1) * (1 + 1e-9) for weight in weights][::-1])[::-1].tolist() + [0.0]
    size = max(int(parts[-1][0][-1]) for parts in blocks) + 1
    scores, seen = np.zeros(size), np.zeros(size, bool)
    searchable = _searched(size, _dead(db), allowed)
    candidates, threshold, scored = np.zeros(0, np.int64), 0.0, 0
    while scored < len(terms) and left[scored] >= threshold:
        for chunks, frequencies, lengths in blocks[scored]:
            scores[chunks] += _contributions(weights[scored], frequencies, lengths, average)
            seen[chunks] = True
        candidates = np.flatnonzero(seen if searchable is None else seen & searchable)
        threshold, scored = _kth(scores[candidates], k), scored + 1
    for term in range(scored, len(terms)):
        candidates = candidates[scores[candidates] + left[term] >= threshold]  # those that can still make it
        for chunks, frequencies, lengths in blocks[term]:
            inside = candidates[np.searchsorted(candidates, chunks[0]) : np.searchsorted(candidates, chunks[-1], "right")]
            at = np.minimum(np.searchsorted(chunks, inside), len(chunks) - 1)
            found = chunks[at] == inside
            scores[inside[found]] += _contributions(weights[term], frequencies[at[found]], lengths[at[found]], average)
        threshold = _kth(scores[candidates], k)
    if len(candidates) > k:  # those at least as good as the k-th best, ties included
        candidates = candidates[scores[candidates] >= _kth(scores[candidates], k)]
    best = candidates[np.lexsort((candidates, -scores[candidates]))][:k]
    return [(int(n), float(scores[n])) for n in best]
