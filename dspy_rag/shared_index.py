"""A shared index: everything a reader needs on the Chroma server, so any process with its URL reads the index.

An index on a server is a vector collection NAME (chunk vectors, text and metadata, as without a server) and a
catalog collection NAME.catalog holding one record per source and commit (its sha256, kind, time of ingest
and chunk ids), the head (the number of the last commit) and the writer's lease (dspy_rag.server_lease).
A commit writes the new records of the sources it changed under the next number, then moves the head: that one
record is the commit point. Records numbered above the head are an interrupted commit's, never read, and swept
by the next writer, as are a source's records a later commit superseded.

Each process keeps a mirror of the committed catalog in its own index folder (a dspy_rag.catalog database, so
keyword search, section titles and chunk text are read locally as without a server) and records which commit it
holds: a reader pulls only when the head moved, and then only the sources that changed. NAME is the configured
`index.collection` when the server holds an index of that name (a second machine joins it), else that name plus
8 random hex digits (a new index: two folders never collide).
"""

import hashlib
import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from dspy_rag.catalog import Catalog
from dspy_rag.chunking import Chunk
from dspy_rag.errors import UserError
from dspy_rag.server_lease import PLACE, Lease

HEAD = "head"
COMMIT = "shared_commit"  # the catalog meta key: the server commit a mirror holds
PULLS = 5  # pulls tried while writers keep committing
BATCH = 500  # records per request


def catalog_name(name: str) -> str:
    return f"{name}.catalog"


def _records(client: Any, name: str, create: bool) -> Any:
    if create:
        return client.get_or_create_collection(catalog_name(name), embedding_function=None)
    from chromadb.errors import NotFoundError

    try:
        return client.get_collection(catalog_name(name), embedding_function=None)
    except NotFoundError:
        return None


def _head(records: Any) -> int:
    found = records.get(ids=[HEAD], include=["metadatas"])["metadatas"]
    return found[0]["generation"] if found else 0


def shared_name(client: Any, url: str, wanted: str, create: bool) -> str:
    """The name of the index on the server: `wanted` when the server holds one of that name, else (`create`) a
    new one's, else an error saying how to name the one to read."""
    records = _records(client, wanted, create=False)
    if records is not None and _head(records):
        return wanted
    if not create:
        raise UserError(f"the Chroma server at {url} holds no index named '{wanted}'; set index.collection to the "
                        f"name its `dspy-rag ingest` printed (like {wanted}-1a2b3c4d)")
    return f"{wanted}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class Record:
    """One source as one commit left it; `removed` marks a commit that dropped it."""

    id: str
    source: str
    generation: int
    sha256: str = ""
    kind: str = ""
    ingested_at: str = ""
    chunk_ids: tuple[str, ...] = ()
    removed: bool = False

    @classmethod
    def read(cls, record_id: str, meta: dict[str, Any], document: str) -> "Record":
        return cls(record_id, meta["source"], meta["generation"], meta["sha256"], meta["kind"], meta["ingested_at"],
                   tuple(json.loads(document)), meta["removed"])

    @classmethod
    def new(cls, source: str, generation: int, meta: dict[str, Any] | None = None,
            chunk_ids: tuple[str, ...] = ()) -> "Record":
        """A source's record for commit `generation`: as the catalog's `meta` has it, or removed without one."""
        record_id = f"s{generation}-{hashlib.sha256(source.encode()).hexdigest()[:32]}"
        if meta is None:
            return cls(record_id, source, generation, removed=True)
        return cls(record_id, source, generation, meta["sha256"], meta["kind"], meta["ingested_at"], chunk_ids)

    @property
    def state(self) -> tuple[str, str]:
        """What tells two versions of a source apart."""
        return self.sha256, self.ingested_at

    def row(self) -> tuple[str, dict[str, Any], str]:
        meta = {"type": "source", "source": self.source, "generation": self.generation, "sha256": self.sha256,
                "kind": self.kind, "ingested_at": self.ingested_at, "removed": self.removed}
        return self.id, meta, json.dumps(self.chunk_ids)


class SharedIndex:
    """One index on a Chroma server: its catalog records beside the vector collection `vectors`."""

    def __init__(self, client: Any, vectors: Any, url: str, create: bool) -> None:
        self.vectors, self.name = vectors, vectors.name
        self.where = f"the index {self.name} on {url}"
        self.records = _records(client, self.name, create)
        self.generation = 0  # the commit this process's catalog holds, once pulled or published
        self.known: dict[str, Record] = {}  # that commit's sources
        self._stale: list[str] = []  # record ids a commit superseded, deleted once it is committed
        self._lease: Lease | None = None

    def head(self) -> int:
        """The number of the server's last commit; 0 before the first."""
        return _head(self.records) if self.records is not None else 0

    def _all(self) -> list[Record]:
        found = self.records.get(where={"type": "source"}, include=["metadatas", "documents"])
        return [Record.read(*row) for row in zip(found["ids"], found["metadatas"], found["documents"], strict=True)]

    @staticmethod
    def _latest(records: list[Record], head: int) -> dict[str, Record]:
        """Each source's record as of commit `head`, the removed ones included."""
        latest: dict[str, Record] = {}
        for record in sorted((r for r in records if r.generation <= head), key=lambda r: r.generation):
            latest[record.source] = record
        return latest

    def _chunks(self, ids: list[str]) -> dict[str, Chunk]:
        found: dict[str, Chunk] = {}
        for start in range(0, len(ids), BATCH):
            got = self.vectors.get(ids=ids[start : start + BATCH], include=["documents", "metadatas"])
            for chunk_id, text, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
                found[chunk_id] = Chunk(chunk_id, meta["source"], meta["section"], meta["start"], meta["end"], text)
        return found

    # --- reading ------------------------------------------------------------------------------------

    def pull(self, catalog: Catalog) -> None:
        """Make a catalog opened for writing hold the server's last commit, changing only the sources that differ."""
        for _ in range(PULLS):
            head = self.head()
            committed = {s: r for s, r in self._latest(self._all(), head).items() if not r.removed}
            local = catalog.sources()
            gone = [s for s in local if s not in committed]
            changed = sorted((r for s, r in committed.items()
                              if (local.get(s, {}).get("sha256"), local.get(s, {}).get("ingested_at")) != r.state),
                             key=lambda r: (r.generation, r.source))
            chunks = self._chunks([i for r in changed for i in r.chunk_ids])
            if self.head() != head:
                continue  # a writer committed meanwhile (and may have dropped chunks read above): read again
            if missing := sum(i not in chunks for r in changed for i in r.chunk_ids):
                raise UserError(f"{self.where} lacks the vectors of {missing} committed chunks (lost or damaged); "
                                "run `dspy-rag ingest --repair` against it")
            with catalog.transaction():
                catalog.set_collection(self.name)
                for source in gone:
                    catalog.forget(source)
                for record in changed:
                    catalog.replace(record.source, record.sha256, record.kind,
                                    [chunks[i] for i in record.chunk_ids], record.ingested_at)
                catalog.set_meta(COMMIT, head)
            self.generation, self.known = head, committed
            return
        raise UserError(f"{self.where} changed {PULLS} times while it was read; retry")

    # --- writing ------------------------------------------------------------------------------------

    @contextmanager
    def writing(self, catalog: Catalog, wait: bool) -> Iterator[None]:
        """The lease held (another writer refused, or with `wait` waited for) and `catalog` as last committed on
        the server; an index folder whose server holds no commit yet (one built before sharing) publishes its
        catalog as the first."""
        self._lease = Lease(self.records, self.where)
        self._lease.acquire(wait)
        try:
            self._sweep()
            if self.head():
                self.pull(catalog)
            else:
                self.publish(catalog)
                self.prune()
            yield
        finally:
            self._lease.release()
            self._lease = None

    def _sweep(self) -> None:
        """Delete an interrupted commit's records and those a later commit superseded."""
        head, records = self.head(), self._all()
        latest = {r.id for r in self._latest(records, head).values() if not r.removed}
        self._delete([r.id for r in records if r.id not in latest])

    def _delete(self, ids: list[str]) -> None:
        for start in range(0, len(ids), BATCH):
            self.records.delete(ids=ids[start : start + BATCH])

    def publish(self, catalog: Catalog) -> None:
        """Commit to the server what `catalog` (in its writer's transaction) changed since the last commit."""
        assert self._lease is not None, "publish holds the lease"
        self._lease.check()
        local = catalog.sources()
        generation = self.generation + 1
        records = [Record.new(s, generation, meta, tuple(catalog.chunk_ids(s))) for s, meta in local.items()
                   if s not in self.known or self.known[s].state != (meta["sha256"], meta["ingested_at"])]
        records += [Record.new(s, generation) for s in self.known if s not in local]
        if not records:
            return
        for start in range(0, len(records), BATCH):
            ids, metas, documents = zip(*(r.row() for r in records[start : start + BATCH]), strict=True)
            self.records.upsert(ids=list(ids), embeddings=[PLACE] * len(ids), metadatas=list(metas),
                                documents=list(documents))
        self.records.upsert(ids=[HEAD], embeddings=[PLACE], metadatas=[{"generation": generation}])  # the commit
        catalog.set_meta(COMMIT, generation)
        self._stale += [self.known[r.source].id for r in records if r.source in self.known]
        self._stale += [r.id for r in records if r.removed]
        self.known.update((r.source, r) for r in records)
        for record in records:
            if record.removed:
                del self.known[record.source]
        self.generation = generation

    def prune(self) -> None:
        """After a commit: delete the records it superseded."""
        self._delete(self._stale)
        self._stale = []
