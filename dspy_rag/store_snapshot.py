"""A reader's private copy of an embedded Chroma store, so that reading an index never writes to it.

Chroma 1.5 writes whenever it opens a store: its client inserts a row into the SQLite `acquire_write` table on
start, whatever the migration mode, and the first read of a collection re-creates the HNSW files of a segment
never persisted yet (fewer vectors than its sync threshold) and applies log entries the segments lack. Its SQLite
path is not a URI, so it cannot be opened read-only. A reader therefore opens a copy in the temporary folder:
a consistent copy of the database, then the segment folders.
"""

import shutil
import sqlite3
import tempfile
import weakref
from contextlib import closing
from pathlib import Path

DATABASE = "chroma.sqlite3"


class StoreSnapshot:
    """A copy of the Chroma store folder `store`, removed when the snapshot is garbage collected or at exit."""

    def __init__(self, store: Path) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="dspy-rag-reader-"))
        self._remove = weakref.finalize(self, shutil.rmtree, self.path, ignore_errors=True)
        try:
            if (store / DATABASE).exists():
                _copy_database(store / DATABASE, self.path / DATABASE)
            # After the database: a segment copied later can only be newer than the database records, and Chroma
            # applies again only log entries it does not hold yet.
            for segment in store.iterdir() if store.is_dir() else ():
                if segment.is_dir():
                    shutil.copytree(segment, self.path / segment.name)
        except BaseException:
            self._remove()
            raise


def _copy_database(database: Path, target: Path) -> None:
    """The last committed state, read without a write: SQLite's backup holds a shared lock, so an ingest that
    commits meanwhile waits for it (or the copy restarts)."""
    try:
        with closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)) as source, \
                closing(sqlite3.connect(target)) as copy:
            copy.execute("PRAGMA synchronous = OFF")  # a copy thrown away after use needs no fsync
            source.backup(copy)
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorname != "SQLITE_READONLY_ROLLBACK":
            raise
        # A writer stopped mid-commit left its journal, which only a writable connection rolls back: copy both,
        # and Chroma rolls the copy back when it opens it, as it would the original.
        shutil.copyfile(database, target)
        shutil.copyfile(database.with_name(database.name + "-journal"), target.with_name(target.name + "-journal"))
