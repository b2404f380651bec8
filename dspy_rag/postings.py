"""The persisted keyword index: BM25 postings in the catalog's database, kept up to date chunk by chunk.

Each chunk's terms are stored once at ingest (`postings`: term, chunk, frequency, the chunk's length) with each
term's document count (`terms`) and the corpus totals (`meta`). Adding or removing a chunk touches only its own
rows, and a query reads only the postings of its own terms, scored inside SQLite with rank-bm25's formula and
Lucene's idf (dspy_rag.bm25), so a reader never builds anything.
"""

import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence

from dspy_rag.bm25 import K1, B, lucene_idf

SCHEMA = """
CREATE TABLE terms (id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE, documents INTEGER NOT NULL) STRICT;
CREATE TABLE postings (term INTEGER NOT NULL, chunk INTEGER NOT NULL, frequency INTEGER NOT NULL,
                       length INTEGER NOT NULL, PRIMARY KEY (term, chunk)) STRICT, WITHOUT ROWID;
"""

# rank-bm25's term score, tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average length)); `?` is the average
_SCORE = f"p.frequency * {K1 + 1!r} / (p.frequency + {K1!r} * ({1 - B!r} + {B!r} * p.length / ?))"


def marks(count: int) -> str:
    """Placeholders for `count` bound values."""
    return ", ".join("?" * count)


def _totals(db: sqlite3.Connection) -> tuple[int, int]:
    """The number of chunks and the number of tokens they hold."""
    rows = dict(db.execute("SELECT key, value FROM meta WHERE key IN ('chunk_count', 'token_count')").fetchall())
    return rows.get("chunk_count", 0), rows.get("token_count", 0)


def _set_totals(db: sqlite3.Connection, chunks: int, tokens: int) -> None:
    db.executemany("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                   [("chunk_count", chunks), ("token_count", tokens)])


def add(db: sqlite3.Connection, chunks: Iterable[tuple[int, Sequence[str]]]) -> None:
    """Index chunks, given as (chunk number, tokens)."""
    counted = [(number, Counter(tokens), len(tokens)) for number, tokens in chunks]
    documents = Counter(term for _, counts, _ in counted for term in counts)
    db.executemany("INSERT INTO terms (term, documents) VALUES (?, ?) "
                   "ON CONFLICT (term) DO UPDATE SET documents = documents + excluded.documents",
                   documents.items())
    ids = _term_ids(db, list(documents))
    db.executemany("INSERT INTO postings (term, chunk, frequency, length) VALUES (?, ?, ?, ?)",
                   ((ids[term], number, tf, length) for number, counts, length in counted for term, tf in counts.items()))
    chunk_count, token_count = _totals(db)
    _set_totals(db, chunk_count + len(counted), token_count + sum(length for *_, length in counted))


def remove(db: sqlite3.Connection, chunks: Iterable[tuple[int, Sequence[str]]]) -> None:
    """Drop chunks from the index, given as (chunk number, tokens) as they were added."""
    counted = [(number, Counter(tokens), len(tokens)) for number, tokens in chunks]
    documents = Counter(term for _, counts, _ in counted for term in counts)
    ids = _term_ids(db, list(documents))
    db.executemany("DELETE FROM postings WHERE term = ? AND chunk = ?",
                   ((ids[term], number) for number, counts, _ in counted for term in counts))
    db.executemany("UPDATE terms SET documents = documents - ? WHERE id = ?",
                   ((count, ids[term]) for term, count in documents.items()))
    db.executemany("DELETE FROM terms WHERE id = ? AND documents <= 0", ((ids[term],) for term in documents))
    chunk_count, token_count = _totals(db)
    _set_totals(db, chunk_count - len(counted), token_count - sum(length for *_, length in counted))


def _term_ids(db: sqlite3.Connection, terms: list[str]) -> dict[str, int]:
    ids: dict[str, int] = {}
    for start in range(0, len(terms), 10_000):  # below SQLite's limit on bound parameters
        part = terms[start : start + 10_000]
        ids.update(db.execute(f"SELECT term, id FROM terms WHERE term IN ({marks(len(part))})", part))
    return ids


def search(db: sqlite3.Connection, tokens: Sequence[str], k: int, sections: Sequence[str] = ()
           ) -> list[tuple[int, float]]:
    """The k best (chunk number, BM25 score) for the query's tokens, best first; ties by chunk number. A token
    repeated in the query counts as often as it is repeated, as in rank-bm25; only sections named are searched."""
    chunk_count, token_count = _totals(db)
    counts = Counter(tokens)
    terms = list(counts)
    if not chunk_count or not terms:
        return []
    found = db.execute(f"SELECT id, term, documents FROM terms WHERE term IN ({marks(len(terms))})",
                       terms).fetchall()
    if not found:
        return []
    weights = [(term_id, lucene_idf(chunk_count, documents) * counts[term]) for term_id, term, documents in found]
    inside = (f"AND p.chunk IN (SELECT n FROM chunks WHERE section IN ({marks(len(sections))}))"
              if sections else "")
    query = (f"WITH q (term, weight) AS (VALUES {', '.join(['(?, ?)'] * len(weights))}) "
             f"SELECT p.chunk, SUM(q.weight * {_SCORE}) AS score FROM q JOIN postings p ON p.term = q.term "
             f"WHERE 1 {inside} GROUP BY p.chunk ORDER BY score DESC, p.chunk LIMIT ?")
    parameters = [value for pair in weights for value in pair] + [token_count / chunk_count, *sections, k]
    return db.execute(query, parameters).fetchall()
