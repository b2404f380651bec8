"""A shared index's records and lease (dspy_rag.shared_index, dspy_rag.server_lease) on a real Chroma client.

Chroma's embedded client runs the same collection code as `chroma run`, so the commit, the mirror's pull and
the lease are checked here without a server or an embedding model; tests/test_shared_index.py runs them
between processes against a real server.
"""

from pathlib import Path
from typing import Any

import chromadb
import pytest
from chromadb.config import Settings

from dspy_rag import server_lease
from dspy_rag.catalog import Catalog
from dspy_rag.chunking import Chunk
from dspy_rag.errors import UserError
from dspy_rag.server_lease import Lease
from dspy_rag.shared_index import COMMIT, HEAD, Record, SharedIndex, shared_name
from dspy_rag.tokenizer import tokenize

MODEL = "local/all-minilm-l6-v2"
URL = "http://chroma.example:8000"


@pytest.fixture
def client(tmp_path: Path) -> Any:
    return chromadb.PersistentClient(path=str(tmp_path / "chroma"), settings=Settings(anonymized_telemetry=False))


def chunks(source: str, *texts: str) -> list[Chunk]:
    return [Chunk(f"{abs(hash((source, text))):016x}-{n:05}", source, "Body", 0, len(text), text)
            for n, text in enumerate(texts)]


class Writer:
    """A writer as dspy_rag.index drives one: vectors first, then the catalog's transaction, published in it."""

    def __init__(self, client: Any, folder: Path, name: str) -> None:
        self.vectors = client.get_or_create_collection(name, embedding_function=None)
        self.shared = SharedIndex(client, self.vectors, URL, create=True)
        self.catalog = Catalog(folder, MODEL, writer=True)
        self.catalog.set_collection(name)

    def commit(self, files: dict[str, list[Chunk]], dropped: tuple[str, ...] = ()) -> None:
        every = [c for part in files.values() for c in part]
        if every:
            self.vectors.upsert(ids=[c.id for c in every], embeddings=[[1.0, float(i)] for i in range(len(every))],
                                documents=[c.text for c in every], metadatas=[c.metadata for c in every])
        with self.catalog.transaction():
            for source, part in files.items():
                self.catalog.replace(source, f"sha-{hash(tuple(c.text for c in part))}", "md", part)
            for source in dropped:
                self.catalog.forget(source)
            self.shared.publish(self.catalog)
        self.shared.prune()


def mirror(client: Any, folder: Path, name: str) -> Catalog:
    catalog = Catalog(folder, MODEL, writer=True)
    SharedIndex(client, client.get_collection(name), URL, create=False).pull(catalog)
    return catalog


def state(catalog: Catalog) -> tuple[Any, ...]:
    """What a reader reads: sources, chunks and keyword scores."""
    sources = {s: (m["sha256"], m["ingested_at"], m["sections"]) for s, m in catalog.sources().items()}
    found = catalog.keyword_search(tokenize("widgets norway gizmos"), 10)
    return sources, [c.id for c in catalog.every_chunk()], [(c.id, round(score, 9)) for c, score in found]


def test_a_mirror_pulls_each_commit_and_only_what_changed(client: Any, tmp_path: Path) -> None:
    writer = Writer(client, tmp_path / "w", "documents-00000001")
    with writer.shared.writing(writer.catalog, wait=False):
        writer.commit({"a.md": chunks("a.md", "Widgets are sold in Norway.", "Widgets are blue.")})
        reader = mirror(client, tmp_path / "r", "documents-00000001")
        assert state(reader) == state(writer.catalog) and reader.meta(COMMIT) == 1
        writer.commit({"b.md": chunks("b.md", "Gizmos are sold in Chile.")})
        writer.commit({"a.md": chunks("a.md", "Widgets are sold in Norway.", "Widgets are red now.")},
                      dropped=("b.md",))
    SharedIndex(client, writer.vectors, URL, create=False).pull(reader)
    assert state(reader) == state(writer.catalog) and reader.meta(COMMIT) == 3
    assert list(reader.sources()) == ["a.md"]
    records = client.get_collection("documents-00000001.catalog").get(where={"type": "source"})["ids"]
    assert len(records) == 1  # superseded records and the removal's are pruned once committed


def test_an_interrupted_commit_is_never_read_and_the_next_writer_sweeps_it(client: Any, tmp_path: Path) -> None:
    writer = Writer(client, tmp_path / "w", "documents-00000002")
    with writer.shared.writing(writer.catalog, wait=False):
        writer.commit({"a.md": chunks("a.md", "Widgets are sold in Norway.")})
        committed = state(writer.catalog)
        # A commit cut short after its records and before the head: a record numbered above the head.
        half = Record.new("b.md", 2, {"sha256": "x", "kind": "md", "ingested_at": "now"}, ("missing-00000",))
        record_id, meta, document = half.row()
        writer.shared.records.upsert(ids=[record_id], embeddings=[[1.0]], metadatas=[meta], documents=[document])
    assert state(mirror(client, tmp_path / "r", "documents-00000002")) == committed
    again = Writer(client, tmp_path / "w2", "documents-00000002")
    with again.shared.writing(again.catalog, wait=False):
        assert state(again.catalog) == committed  # a new folder starts from the server's last commit
    assert half.id not in again.shared.records.get(where={"type": "source"})["ids"]


def test_a_second_writer_is_refused_until_the_lease_is_freed_or_expires(client: Any, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    records = client.get_or_create_collection("documents-00000003.catalog", embedding_function=None)
    first, second = Lease(records, "the index documents-00000003"), Lease(records, "the index documents-00000003")
    first.acquire(wait=False)
    with pytest.raises(UserError, match=r"another ingest \(.* pid \d+\) is writing to the index documents-00000003"):
        second.acquire(wait=False)
    first.release()
    monkeypatch.setattr(server_lease, "LEASE", 0.0)  # a lease that has expired as soon as it is written
    second.acquire(wait=False)
    second._stop.set()  # a writer killed: its lease is no longer renewed
    third = Lease(records, "the index documents-00000003")
    third.acquire(wait=False)
    assert records.get(ids=["lease"])["metadatas"][0]["token"] == third.token
    third.release()


def test_an_index_is_joined_by_its_name_and_a_new_one_gets_its_own(client: Any, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="holds no index named 'documents'; set index.collection"):
        shared_name(client, URL, "documents", create=False)
    name = shared_name(client, URL, "documents", create=True)
    assert name.startswith("documents-") and name != shared_name(client, URL, "documents", create=True)
    writer = Writer(client, tmp_path / "w", name)
    with writer.shared.writing(writer.catalog, wait=False):
        writer.commit({"a.md": chunks("a.md", "Widgets.")})
    assert shared_name(client, URL, name, create=False) == name
    assert client.get_collection(f"{name}.catalog").get(ids=[HEAD])["metadatas"][0]["generation"] == 1
