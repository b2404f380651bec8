"""The index's catalog: its sources, chunks and keyword postings in one SQLite database in WAL mode.

A write transaction is an ingest's commit point, one per file: it adds and removes only the rows of what
changed. Readers see the last committed state, also while a writer works, and never write a file of the index
folder: a reader opens the database read-only (immutable when its folder cannot be written), and a writer,
when it ends, leaves SQLite's `-wal` and `-shm` files in place, so that a reader finds them and creates nothing.
A catalog of the JSON format before it (dspy_rag.legacy_catalog) is migrated by the first writer; until
then a reader reads it into memory.
"""

import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from dspy_rag import postings
from dspy_rag.chunking import Chunk
from dspy_rag.errors import UserError
from dspy_rag.legacy_catalog import read_legacy
from dspy_rag.postings import marks
from dspy_rag.tokenizer import tokenize

FORMAT = 2
DATABASE = "catalog.sqlite3"
LEGACY = "catalog.json"
SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value ANY) STRICT;
CREATE TABLE sources (source TEXT PRIMARY KEY, sha256 TEXT NOT NULL, kind TEXT NOT NULL, chunks INTEGER NOT NULL,
                      sections TEXT NOT NULL, ingested_at TEXT NOT NULL) STRICT;
CREATE TABLE chunks (n INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, source TEXT NOT NULL, section TEXT NOT NULL,
                     start INTEGER NOT NULL, stop INTEGER NOT NULL, text TEXT NOT NULL, tokens TEXT NOT NULL) STRICT;
CREATE INDEX chunks_by_source ON chunks (source);
CREATE INDEX chunks_by_section ON chunks (section);
""" + postings.SCHEMA
CHUNK = "id, source, section, start, stop, text"
SOURCE = "source, sha256, kind, chunks, sections, ingested_at"
# Chunk numbers are never reused (AUTOINCREMENT): the keyword index lists removed ones as dead.
BATCH = 10_000  # bound values per statement, below SQLite's limit
POSTINGS_BATCH = 2048  # chunks whose postings are built in memory at a time (a new block per term each)
CACHE_KB = 128 * 1024  # a reader's page cache at most


def _chunk(row: Sequence[Any]) -> Chunk:
    return Chunk(*row)


def _source(row: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    source, sha256, kind, chunks, sections, ingested_at = row
    return source, {"sha256": sha256, "kind": kind, "chunks": chunks, "sections": json.loads(sections),
                    "ingested_at": ingested_at}


def _cached(db: sqlite3.Connection) -> sqlite3.Connection:
    """A reader's connection with a page cache that holds the postings of the common words queries share: with
    SQLite's default of 2 MB, a query at 100,000 chunks reads megabytes of them from the file again each time
    (reading a query's postings again took 5 ms of CPU, against 1 ms cached). It grows only with what is read."""
    db.execute(f"PRAGMA cache_size = -{CACHE_KB}")
    return db


def _fresh(db: sqlite3.Connection, meta: dict[str, Any]) -> sqlite3.Connection:
    db.executescript(SCHEMA)
    db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", meta.items())
    return db


class Catalog:
    """One index folder's catalog, opened for reading, or with `writer` (under the ingest lock) for writing."""

    def __init__(self, root: Path, embedding_model: str, writer: bool = False) -> None:
        self.root, self.path = root, root / DATABASE
        self.writer = writer
        self._lock = threading.RLock()  # one connection, shared by a server's threads: one transaction at a time
        legacy = root / LEGACY
        try:
            if self.path.exists():
                self._db = self._connect()
                self._check(embedding_model)
                if writer:
                    legacy.unlink(missing_ok=True)  # migrated already, by a writer stopped before it removed it
                return
        except sqlite3.DatabaseError as exc:
            raise UserError(f"index catalog {self.path} is unreadable ({exc}); re-ingest into a new --index") from exc
        self._db = self._memory()
        if legacy.exists():
            catalog = read_legacy(legacy)
            try:
                self._fill(catalog)
            except sqlite3.Error as exc:  # a field of a type the tables refuse
                raise UserError(f"index catalog {legacy} is damaged ({exc}); re-ingest into a new --index") from exc
            self._check(embedding_model)
            if writer:
                self.persist()
                legacy.unlink()
        else:
            _fresh(self._db, {"format": FORMAT, "embedding_model": embedding_model, "collection": None})

    # --- opening ------------------------------------------------------------------------------------

    @staticmethod
    def _memory() -> sqlite3.Connection:
        return sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)

    def _connect(self) -> sqlite3.Connection:
        if self.writer:
            db = sqlite3.connect(self.path, isolation_level=None, timeout=60, check_same_thread=False)
            db.execute("PRAGMA synchronous = FULL")  # a commit survives a crash of the machine too
            return db
        uri = self.path.resolve().as_uri()
        try:
            db = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None, timeout=60, check_same_thread=False)
            db.execute("SELECT 1 FROM meta LIMIT 1")
            return _cached(db)
        except sqlite3.OperationalError:
            if os.access(self.root, os.W_OK) or self.path.with_name(DATABASE + "-wal").exists():
                raise
        # A folder nobody can write holds no writer either: the database cannot change while it is read.
        return _cached(sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None, check_same_thread=False))

    def _check(self, embedding_model: str) -> None:
        if self.meta("format") != FORMAT:
            raise UserError(f"{self.path} is not a dspy-rag index of format {FORMAT}; use another --index")
        if (built := self.meta("embedding_model")) != embedding_model:
            raise UserError(f"index {self.root} was built with embedding model '{built}', not '{embedding_model}'; "
                            "use that model or a new --index")

    def _fill(self, legacy: dict[str, Any]) -> None:
        """The tables from a format-1 catalog, its stored tokens reused."""
        _fresh(self._db, {"format": FORMAT, "embedding_model": legacy["embedding_model"],
                          "collection": legacy["collection"]})
        with self._transaction():  # in memory: the file appears whole, or not at all
            for source, meta in legacy["sources"].items():
                self._add_source(source, meta["sha256"], meta.get("kind", ""), meta.get("chunks", 0),
                                 meta["sections"], meta.get("ingested_at", ""))
            self._add_chunks((i, row["source"], row["section"], row["start"], row["end"], row["text"], row["tokens"])
                             for i, row in legacy["chunks"].items())

    @property
    def exists(self) -> bool:
        return self.path.exists() or (self.root / LEGACY).exists()

    def persist(self) -> None:
        """A writer's catalog held in memory (a new index, a migrated one) becomes the database file, whole."""
        if self.path.exists():
            return
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.path.with_name(f".{DATABASE}.staging")
        for leftover in (staging, staging.with_name(staging.name + "-journal")):  # of a writer stopped here
            leftover.unlink(missing_ok=True)
        with closing(sqlite3.connect(staging)) as target:
            self._db.backup(target)
            target.execute("PRAGMA journal_mode = WAL")  # recorded in the file: every connection uses it
        os.replace(staging, self.path)
        self._db.close()
        self._db = self._connect()

    def close(self) -> None:
        """Close; a writer leaves the `-wal` and `-shm` files behind, for readers to use without creating them."""
        self._db.close()
        if self.writer and self.path.exists():
            with closing(sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)) as reader:
                reader.execute("SELECT 1 FROM meta LIMIT 1")

    # --- reading ------------------------------------------------------------------------------------

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every statement in it sees the same commit."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                yield self._db
            finally:
                self._db.execute("COMMIT")

    def meta(self, key: str) -> Any:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    @property
    def collection(self) -> str | None:
        return self.meta("collection")

    def count(self) -> int:
        """The number of chunks committed."""
        return self.meta("chunk_count") or 0

    def ids(self) -> set[str]:
        return {i for (i,) in self._db.execute("SELECT id FROM chunks")}

    def sample(self, size: int) -> list[str]:
        """Up to `size` chunk ids spread over the catalog."""
        first, last = self._db.execute("SELECT min(n), max(n) FROM chunks").fetchone()
        if first is None:
            return []
        # A seek per sample on the chunk numbers, not a scan of every chunk's row (its text with it).
        found = (self._db.execute("SELECT id FROM chunks WHERE n >= ? ORDER BY n LIMIT 1", (int(n),)).fetchone()
                 for n in np.unique(np.linspace(first, last, size).round()))
        return list(dict.fromkeys(row[0] for row in found if row))

    def chunks(self, ids: Sequence[str]) -> dict[str, Chunk]:
        """The committed chunks among `ids`, by id."""
        found: dict[str, Chunk] = {}
        for start in range(0, len(ids), BATCH):
            part = list(ids[start : start + BATCH])
            rows = self._db.execute(f"SELECT {CHUNK} FROM chunks WHERE id IN ({marks(len(part))})", part)
            found.update((row[0], _chunk(row)) for row in rows)
        return found

    def every_chunk(self) -> Iterator[Chunk]:
        return (_chunk(row) for row in self._db.execute(f"SELECT {CHUNK} FROM chunks ORDER BY n"))

    def sources(self) -> dict[str, dict[str, Any]]:
        """Each source's sha256, kind, chunk count, section titles and time of ingest."""
        return dict(map(_source, self._db.execute(f"SELECT {SOURCE} FROM sources ORDER BY rowid")))

    def source(self, name: str) -> dict[str, Any] | None:
        """One source's entry of `sources`, or None."""
        row = self._db.execute(f"SELECT {SOURCE} FROM sources WHERE source = ?", (name,)).fetchone()
        return _source(row)[1] if row else None

    def chunk_ids(self, source: str) -> list[str]:
        """The ids of a source's chunks, in the order ingested."""
        return [i for (i,) in self._db.execute("SELECT id FROM chunks WHERE source = ? ORDER BY n", (source,))]

    def keyword_search(self, tokens: Sequence[str], k: int, sections: Sequence[str] = ()
                       ) -> list[tuple[Chunk, float]]:
        """The k best BM25 matches, best first (dspy_rag.postings)."""
        with self._reading() as db:
            allowed = np.fromiter((n for (n,) in db.execute(
                f"SELECT n FROM chunks WHERE section IN ({marks(len(sections))})", list(sections))), np.int64
            ) if sections else None
            ranked = postings.search(db, tokens, k, allowed)
            rows = {row[0]: row[1:] for row in db.execute(
                f"SELECT n, {CHUNK} FROM chunks WHERE n IN ({marks(len(ranked))})", [n for n, _ in ranked])}
        return [(_chunk(rows[n]), score) for n, score in ranked]

    # --- writing ------------------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """A writer's transaction: all of it is committed, or none of it. A new index's file appears at the first."""
        self.persist()
        with self._transaction():
            yield

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def set_collection(self, name: str) -> None:
        """Name the Chroma collection; a new index's catalog keeps it in memory until its first commit."""
        self.set_meta("collection", name)

    def set_meta(self, key: str, value: Any) -> None:
        """Record a value of the catalog's own (within a writer's transaction, it commits with it)."""
        with self._lock:
            self._db.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                             "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))

    def _add_source(self, source: str, sha256: str, kind: str, chunks: int, sections: list[str],
                    ingested_at: str) -> None:
        self._db.execute("INSERT INTO sources VALUES (?, ?, ?, ?, ?, ?)",
                         (source, sha256, kind, chunks, json.dumps(sections, ensure_ascii=False), ingested_at))

    def _add_chunks(self, rows: Iterable[tuple[str, str, str, int, int, str, str]]) -> None:
        """Insert chunks given as (id, source, section, start, stop, text, tokens) and index their tokens,
        POSTINGS_BATCH chunks at a time: a large file's postings are never all in memory at once."""
        rows = iter(rows)
        while batch := list(islice(rows, POSTINGS_BATCH)):
            added = []
            for row in batch:
                number = self._db.execute("INSERT INTO chunks (id, source, section, start, stop, text, tokens) "
                                          "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING n", row).fetchone()[0]
                added.append((number, row[-1].split()))
            postings.add(self._db, added)

    def forget(self, source: str, keep: frozenset[str] = frozenset()) -> list[str]:
        """Within a transaction: remove `source` and its chunks but the ids in `keep`; returns the removed ids."""
        rows = self._db.execute("SELECT n, id, tokens FROM chunks WHERE source = ?", (source,)).fetchall()
        dropped = [(n, i, tokens) for n, i, tokens in rows if i not in keep]
        for start in range(0, len(dropped), POSTINGS_BATCH):  # a large file's token lists a batch at a time
            postings.remove(self._db, [(n, tokens.split()) for n, _, tokens in dropped[start : start + POSTINGS_BATCH]])
        self._db.executemany("DELETE FROM chunks WHERE n = ?", [(n,) for n, *_ in dropped])
        self._db.execute("DELETE FROM sources WHERE source = ?", (source,))
        return [i for _, i, _ in dropped]

    def replace(self, source: str, sha256: str, kind: str, chunks: list[Chunk], ingested_at: str | None = None
                ) -> list[str]:
        """Within a transaction: `source` now holds `chunks` (ingested now, or at `ingested_at`); returns the chunk
        ids it superseded. A chunk it held already (same id, so the same text at the same place) is left as it is."""
        kept = frozenset(self.chunks([c.id for c in chunks]))
        superseded = self.forget(source, keep=kept)
        self._add_chunks((c.id, c.source, c.section, c.start, c.end, c.text, " ".join(tokenize(c.indexed_text)))
                         for c in chunks if c.id not in kept)
        self._add_source(source, sha256, kind, len(chunks), list(dict.fromkeys(c.section for c in chunks)),
                         ingested_at or datetime.now(UTC).isoformat(timespec="seconds"))
        return superseded
