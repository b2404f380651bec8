"""The document index: chunks in Chroma (vectors) and a catalog database (sources, chunk text, keyword postings).

The catalog is the commit point (dspy_rag.catalog). Ingest writes a file's chunks to Chroma first, then commits
them to the catalog in one transaction, then deletes the chunks it superseded. Readers only trust chunk ids the
catalog lists, so an interrupted ingest leaves the previous index fully usable, and the next ingest sweeps its
leftovers. A reader never writes to the index folder: an embedded store is read from a private copy
(dspy_rag.store_snapshot). With a Chroma server the server holds the catalog too, and the commit point is
there; the folder's catalog is then this process's mirror of it (dspy_rag.shared_index).
"""

import hashlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from filelock import FileLock, Timeout

from dspy_rag import paths
from dspy_rag.catalog import Catalog
from dspy_rag.chunking import Chunk, chunk_document
from dspy_rag.config import Config, url_problem
from dspy_rag.documents import SUPPORTED_SUFFIXES, Document, download, kind_of, parse, read_bytes
from dspy_rag.errors import UserError
from dspy_rag.shared_index import COMMIT, SharedIndex, shared_name
from dspy_rag.store_snapshot import StoreSnapshot
from dspy_rag.tokenizer import tokenize

ProgressFn = Callable[[str, int, int], None]


VECTOR_SAMPLE = 64  # chunk ids looked up in the vector store when an index is opened for reading
EMBED_BATCH = 256  # chunks embedded and upserted at a time: an ingest holds no more vectors than this


@dataclass(frozen=True)
class Hit:
    chunk: Chunk
    score: float


@dataclass
class IngestReport:
    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    chunks_written: int = 0
    repaired: int = 0  # chunks of the catalog whose lost vectors were embedded again (`ingest --repair`)
    seconds: float = 0.0


def _is_url(value: str) -> bool:
    """An http(s) address, told by its scheme alone: a malformed one is still an address, refused as one."""
    scheme, colon, _ = value.partition(":")
    return bool(colon) and scheme.lower() in ("http", "https")


def indexed_source(item: str) -> str:
    """The name a file or URL is indexed under: its absolute path, which must be valid UTF-8 to be stored."""
    if _is_url(item):
        return item
    source = str(Path(item).resolve())
    try:
        source.encode("utf-8")
    except UnicodeEncodeError:
        readable = os.fsencode(item).decode("utf-8", "backslashreplace")
        raise UserError(f"{readable}: the file name is not valid UTF-8; rename the file, then ingest it") from None
    return source


def text_sha256(document: Document) -> str:
    """What an index records as the content of a document ingested from memory."""
    return hashlib.sha256(document.text.encode()).hexdigest()


def file_contents(files: list[str]) -> dict[str, str]:
    """Each file's indexed name and the sha256 of its bytes, as an ingest records them; empty when one cannot be
    read (an ingest then reports it)."""
    try:
        return {indexed_source(file): hashlib.sha256(read_bytes(Path(file))).hexdigest() for file in files}
    except UserError:
        return {}


def _leads_to_a_file(link: Path) -> bool:
    """A symlink to a file; one that leads nowhere, or through a place we may not look, leads to none."""
    try:
        return link.is_file()
    except OSError:
        return False


def expand_inputs(inputs: list[str]) -> tuple[list[str], list[str]]:
    """Files and URLs to ingest, and files skipped in folders because their type is unsupported.

    Folders are walked without following symlinks, so a symlink loop cannot trap the walk.
    """
    found, skipped = [], []
    for item in inputs:
        if _is_url(item):
            if problem := url_problem(item):
                raise UserError(problem)
            found.append(item)
            continue
        path = paths.named(Path(item), "ingest input")
        if path.is_dir():
            if paths.in_system_folder(path):  # /proc alone holds every process's files, few of them readable
                raise UserError(f"{item} is a system folder; ingest a folder of your documents")
            for root, dirs, files in os.walk(path, followlinks=False):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    file = Path(root) / name
                    if name.startswith(".") or file.is_symlink() and not _leads_to_a_file(file):
                        continue
                    (found if file.suffix.lower() in SUPPORTED_SUFFIXES else skipped).append(str(file))
        elif not path.exists():
            raise UserError(f"{item} does not exist; check the path (or pass an http(s) URL)")
        else:
            kind_of(path)  # an explicitly named file of an unsupported type is an error, not a skip
            found.append(str(path))
    return found, skipped


class Index:
    """One corpus: an index folder holding the catalog, plus a Chroma collection (embedded or server)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.root = config.index.path
        self.catalog = Catalog(self.root, config.embedding.model)
        self._collection: Any = None
        self._embedder: Any = None
        self._reading = False  # set by `require`: Chroma then opens a copy of an embedded store
        self._snapshot: StoreSnapshot | None = None
        self._shared: SharedIndex | None = None  # a writer's index on a server (index.chroma_url)

    # --- catalog ------------------------------------------------------------------------------------

    @property
    def catalog_path(self) -> Path:
        return self.catalog.path

    @property
    def exists(self) -> bool:
        return self.catalog.exists

    @property
    def chunk_count(self) -> int:
        return self.catalog.count()

    def require(self) -> "Index":
        """The index, for reading: it holds documents, and a vector for each chunk its catalog lists. Nothing in
        its folder is written from then on, not even by Chroma (with a server, but the mirror of its catalog)."""
        if not self._reading:
            self._reading, self._collection = True, None
        if self.config.index.chroma_url:
            self._pull_shared()
        if not self.exists or not self.chunk_count:
            raise UserError(f"no documents indexed in {self.root}; run `dspy-rag ingest FILE` first (or pass --index)")
        self.check_vectors()
        return self

    def _holds(self, contents: dict[str, str]) -> bool:
        """True when the committed catalog holds exactly these sources (name: sha256) and their vectors: then the
        index is opened for reading only, with nothing to write. Lost vectors are left to the writer to mend."""
        if not self.chunk_count or contents != {s: meta["sha256"] for s, meta in self.sources.items()}:
            return False
        try:
            self.require()
        except UserError:
            return False
        return True

    def _lost_vectors(self, held: int) -> UserError:
        return UserError(f"the vector store of {self.root} holds {held} vectors for the {self.chunk_count} "
                         f"chunks its catalog lists (lost or damaged); run `dspy-rag ingest --repair --index "
                         f"{self.root}` to embed the missing ones again")

    def check_vectors(self) -> None:
        """The vector store's count covers the catalog and a sample of its chunk ids is there: a lost store is an
        error that names the repair, never a silent fall back to keyword search alone."""
        known, sample = self.chunk_count, self.catalog.sample(VECTOR_SAMPLE)
        with self._chroma_failures():
            count = self.collection.count()
            found = len(self.collection.get(ids=sample, include=[])["ids"]) if sample else 0
        if count < known or found < len(sample):
            raise self._lost_vectors(min(count, known))

    def chunks(self) -> Iterator[Chunk]:
        """Every committed chunk, in the order ingested."""
        return self.catalog.every_chunk()

    @property
    def sources(self) -> dict[str, dict[str, Any]]:
        return self.catalog.sources()

    def summary(self, report: IngestReport, sources: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        """An ingest's report as `ingest --json` prints it, with the index's size after it (`sources`: the
        catalog's, when the caller has read them already)."""
        sources = self.sources if sources is None else sources
        return {
            "index": str(self.root), "added": report.added, "replaced": report.replaced, "unchanged": report.unchanged,
            "skipped": report.skipped, "failed": report.failed, "chunks_written": report.chunks_written,
            "repaired": report.repaired, "chunks_total": self.chunk_count,
            "seconds": round(report.seconds, 2),
            "sections": {s: meta["sections"] for s, meta in sources.items() if s in report.added + report.replaced},
        } | ({"collection": self.catalog.collection} if self.config.index.chroma_url else {})

    # --- backends -----------------------------------------------------------------------------------

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            from dspy_rag.embeddings import SentenceEmbedding

            self._embedder = SentenceEmbedding(self.config.embedding.model, self.config.embedding.batch_size)
        return self._embedder

    def _client(self) -> Any:
        import chromadb
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False)
        url = self.config.index.chroma_url
        if not url:
            # Chroma shares one client per path string in a process: a relative one would follow the working folder.
            store = (self.root / "chroma").resolve()
            if self._reading:
                self._snapshot = StoreSnapshot(store)
                store = self._snapshot.path
            return chromadb.PersistentClient(path=str(store), settings=settings)
        parsed = urlparse(url)
        try:
            return chromadb.HttpClient(host=parsed.hostname or "127.0.0.1", port=parsed.port or 8000,
                                       ssl=parsed.scheme == "https", settings=settings)
        except Exception as exc:  # chromadb raises bare ValueError/ConnectionError variants here
            raise UserError(f"cannot reach the Chroma server at {url} ({exc}); start it or unset index.chroma_url") from exc

    def _collection_name(self, client: Any) -> str:
        if self.catalog.collection is None:
            wanted, url = self.config.index.collection, self.config.index.chroma_url
            # On a server an index is joined by its name, and a new one gets a name of its own.
            self.catalog.set_collection(shared_name(client, str(url), wanted, create=not self._reading) if url
                                        else wanted)
        return self.catalog.collection

    @contextmanager
    def _chroma_failures(self) -> Iterator[None]:
        """A Chroma server that went away or a damaged store, as one line that says which and what to do."""
        import httpx
        from chromadb.errors import ChromaError

        try:
            yield
        except (httpx.HTTPError, ChromaError, sqlite3.Error) as exc:  # sqlite3: copying a damaged store
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            if url := self.config.index.chroma_url:
                raise UserError(f"the Chroma server at {url} failed ({detail}); check that it runs, then retry") from exc
            raise UserError(f"the vector store in {self.root / 'chroma'} is damaged ({detail}); "
                            "re-ingest into a new --index") from exc

    @property
    def collection(self) -> Any:
        if self._collection is None:
            client = self._client()
            self._collection = client.get_or_create_collection(
                self._collection_name(client), embedding_function=self.embedder, configuration={"hnsw": {"space": "cosine"}}
            )
        return self._collection

    # --- search -------------------------------------------------------------------------------------

    def _pull_shared(self) -> None:
        """The folder's mirror of a server's index brought to its last commit, when that moved."""
        with self._chroma_failures():
            shared = SharedIndex(self._client(), self.collection, str(self.config.index.chroma_url), create=False)
            head = shared.head()
            if not head or self.catalog.meta(COMMIT) == head:
                return  # a folder built before sharing keeps its own catalog; a current mirror is read as it is
            self.root.mkdir(parents=True, exist_ok=True)
            try:
                lock = FileLock(self.root / ".ingest.lock", timeout=0).acquire()
            except Timeout:
                return  # an ingest in this folder is bringing the mirror up to date: read its last commit
            with lock:
                mirror = Catalog(self.root, self.config.embedding.model, writer=True)
                try:
                    shared.pull(mirror)
                finally:
                    mirror.close()
        self.catalog = Catalog(self.root, self.config.embedding.model)

    @property
    def section_titles(self) -> list[str]:
        return list(dict.fromkeys(title for meta in self.sources.values() for title in meta["sections"]))

    def vector_search(self, query: str, k: int, sections: list[str] | None = None) -> list[Hit]:
        """Nearest chunks by cosine similarity, optionally only within the named sections."""
        return self.vector_search_by(self.embedder.embed_query([query])[0], k, sections)

    def vector_search_by(self, vector: Any, k: int, sections: list[str] | None = None) -> list[Hit]:
        """Nearest chunks to a query vector already embedded."""
        # Over-fetch: chunks of an ingest still running (or killed) sit in Chroma without being committed; when
        # they crowd the committed ones out, fetch wider until k committed ones come back or nothing more does.
        wanted = min(2 * k, max(self.chunk_count, 1)) + 8
        while True:
            with self._chroma_failures():
                result = self.collection.query(query_embeddings=[vector], n_results=wanted,
                                               where={"section": {"$in": sections}} if sections else None,
                                               include=["distances"])
            ids, distances = result["ids"][0], result["distances"][0]
            committed = self.catalog.chunks(ids)
            hits = [Hit(committed[i], 1.0 - d) for i, d in zip(ids, distances, strict=True) if i in committed]
            if len(hits) >= k or len(ids) < wanted:
                return hits[:k]
            wanted *= 4

    def keyword_search(self, query: str, k: int, sections: list[str] | None = None) -> list[Hit]:
        """Best BM25 matches, optionally only within the named sections."""
        return [Hit(chunk, score) for chunk, score in self.catalog.keyword_search(tokenize(query), k, sections or ())]

    # --- ingest -------------------------------------------------------------------------------------

    @contextmanager
    def _writer_lock(self, wait: bool = False) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            held = FileLock(self.root / ".ingest.lock", timeout=-1 if wait else 0).acquire()
        except Timeout as exc:
            raise UserError(f"another ingest is writing to {self.root}; wait for it to finish") from exc
        with held:
            yield

    def _sweep_uncommitted(self, repair: bool, progress: ProgressFn) -> int:
        """Delete the vectors of chunks no commit made (an interrupted ingest's), and find the catalog's chunks that
        have none: embedded again with `repair` (the count is returned), else an error naming the repair."""
        stored, known = set(self.collection.get(include=[])["ids"]), self.catalog.ids()
        stray = list(stored - known)
        for start in range(0, len(stray), 5000):
            self.collection.delete(ids=stray[start : start + 5000])
        missing = [i for i in known if i not in stored]
        if missing and not repair:
            raise self._lost_vectors(len(known) - len(missing))
        self._write_chunks(list(self.catalog.chunks(missing).values()), progress, "embedding lost vectors")
        return len(missing)

    def _load(self, item: str, progress: ProgressFn) -> tuple[bytes, str]:
        if _is_url(item):
            name = f"downloading {Path(urlparse(item).path).name or item}"
            return download(item, self.config.ingest.user_agent,
                            progress=lambda done, total: progress(name, done, total))
        path = Path(item)
        return read_bytes(path), kind_of(path)

    def _write_chunks(self, chunks: list[Chunk], progress: ProgressFn, stage: str) -> None:
        """Embed and upsert the chunks EMBED_BATCH at a time, reporting chunks done under `stage`."""
        if not chunks:
            return
        progress(stage, 0, len(chunks))  # the stage's clock starts before its first batch: its pace is honest
        for start in range(0, len(chunks), EMBED_BATCH):
            part = chunks[start : start + EMBED_BATCH]
            vectors = self.embedder.embed_documents([c.indexed_text for c in part])
            self.collection.upsert(ids=[c.id for c in part], embeddings=vectors,
                                   documents=[c.text for c in part], metadatas=[c.metadata for c in part])
            progress(stage, start + len(part), len(chunks))

    @contextmanager
    def _commit(self) -> Iterator[list[str]]:
        """The commit point: what the block changes in the catalog is one transaction; the chunk ids it adds to the
        list it is given (the ones it superseded) lose their vectors once that committed."""
        superseded: list[str] = []
        with self.catalog.transaction():
            yield superseded
            if self._shared:
                self._shared.publish(self.catalog)
        if superseded:
            self.collection.delete(ids=superseded)
        if self._shared:
            self._shared.prune()

    @contextmanager
    def _shared_writing(self, wait: bool) -> Iterator[None]:
        """With a server: the writer's lease held, and the catalog as the server last committed it."""
        if not (url := self.config.index.chroma_url):
            yield
            return
        self._shared = SharedIndex(self._client(), self.collection, str(url), create=True)
        try:
            with self._shared.writing(self.catalog, wait):
                yield
        finally:
            self._shared = None

    @contextmanager
    def _writing(self, wait: bool = False, repair: bool = False,
                 progress: ProgressFn = lambda *_: None) -> Iterator[IngestReport]:
        """One writer at a time (another is refused, or with `wait` waited for), starting from the catalog as last
        committed; leftovers of an interrupted ingest are swept, and lost vectors found (with `repair`, embedded
        again), before anything new is written."""
        started = time.perf_counter()
        report = IngestReport()
        self._reading, self._collection, self._snapshot = False, None, None  # a writer opens the store itself
        with self._writer_lock(wait), self._chroma_failures():
            # As committed now (a writer before us may have committed since); a JSON catalog is migrated here.
            self.catalog = Catalog(self.root, self.config.embedding.model, writer=True)
            try:
                with self._shared_writing(wait):
                    report.repaired = self._sweep_uncommitted(repair, progress)
                    yield report
                    self.catalog.persist()
            finally:
                self.catalog.close()
                self.catalog = Catalog(self.root, self.config.embedding.model)
        report.seconds = time.perf_counter() - started

    def _unchanged(self, source: str, sha256: str, report: IngestReport) -> bool:
        """True (and reported) when the index already holds this exact content for `source`."""
        if (self.catalog.source(source) or {}).get("sha256") != sha256:
            return False
        report.unchanged.append(source)
        return True

    def _chunks(self, document: Document, report: IngestReport) -> list[Chunk]:
        chunks = chunk_document(document, self.config.ingest.chunk_chars, self.config.ingest.chunk_overlap)
        (report.replaced if self.catalog.source(document.source) else report.added).append(document.source)
        report.chunks_written += len(chunks)
        return chunks

    def ingest(self, inputs: list[str], progress: ProgressFn = lambda *_: None, wait: bool = False,
               repair: bool = False) -> IngestReport:
        """Ingest files, folders and URLs; in a folder, a bad file is reported and the rest go on. Another ingest
        into the same index is refused, or with `wait` waited for; `repair` embeds lost vectors again first."""
        files, skipped = expand_inputs(inputs)
        with self._writing(wait, repair, progress) as report:
            report.skipped = skipped
            self._ingest_files(files, report, progress)
        return report

    def mirror(self, files: list[str]) -> IngestReport:
        """Make this index hold exactly `files`, waiting for another writer. Dropping the other sources and
        ingesting happen under one lock: a process that opened the store before another filled it would read
        a stale Chroma segment. An index that holds them already is only opened for reading."""
        if self._holds(file_contents(files)):
            return IngestReport(unchanged=list(self.sources))
        with self._writing(wait=True, repair=True) as report:  # an index the tool keeps for itself mends itself
            wanted = {indexed_source(file) for file in files}
            if dropped := [s for s in self.sources if s not in wanted]:
                with self._commit() as superseded:
                    superseded += [i for source in dropped for i in self.catalog.forget(source)]
            self._ingest_files(files, report, lambda *_: None)
        return report

    def _ingest_files(self, files: list[str], report: IngestReport, progress: ProgressFn) -> None:
        for number, item in enumerate(files, start=1):
            progress(f"reading {Path(item).name}", number - 1, len(files))
            try:
                source = indexed_source(item)
                data, kind = self._load(item, progress)
                sha256 = hashlib.sha256(data).hexdigest()
                if self._unchanged(source, sha256, report):
                    continue  # before parsing: a large unchanged filing costs only its hash
                document = parse(data, source, kind)
            except UserError as exc:
                if len(files) == 1:
                    raise
                report.failed[item] = str(exc)
                continue
            chunks = self._chunks(document, report)
            self._write_chunks(chunks, progress, f"embedding {Path(item).name}")
            progress(f"committing {Path(item).name}", 0, 0)
            with self._commit() as superseded:  # one commit a file
                superseded += self.catalog.replace(source, sha256, kind, chunks)

    def ingest_documents(self, documents: list[Document], progress: ProgressFn = lambda *_: None) -> IngestReport:
        """Ingest documents already in memory (web snapshots, corpora) into an index this tool caches for itself,
        waiting for another process building it; a document is unchanged if its text is. An index that holds
        exactly these documents is only opened for reading."""
        if self._holds({document.source: text_sha256(document) for document in documents}):
            return IngestReport(unchanged=list(self.sources))
        with self._writing(wait=True, repair=True, progress=progress) as report:
            staged = []
            for document in documents:
                sha256 = text_sha256(document)
                if not self._unchanged(document.source, sha256, report):
                    staged.append((document, sha256, self._chunks(document, report)))
            # Small documents: embed them in shared batches and commit once for the lot.
            self._write_chunks([c for *_, chunks in staged for c in chunks], progress,
                               f"embedding {len(staged)} documents")
            with self._commit() as superseded:
                for document, sha256, chunks in staged:
                    superseded += self.catalog.replace(document.source, sha256, document.kind, chunks)
        return report

    def disk_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.root.rglob("*") if f.is_file())
