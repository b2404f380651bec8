"""The SQLite catalog: the JSON catalog before it migrates, readers see the last commit and write nothing, a commit
writes what changed and no more."""

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from conftest import scratch_config, tree
from dspy_rag.catalog import DATABASE, LEGACY, Catalog
from dspy_rag.chunking import Chunk
from dspy_rag.errors import UserError
from dspy_rag.index import Index
from dspy_rag.retrieval import Retriever

LEGACY_CATALOG = Path(__file__).parent / "data" / "legacy-catalog.json"  # written by dspy-rag 16765d2
MODEL = "local/all-minilm-l6-v2"


def legacy_index(tmp_path: Path) -> Path:
    (tmp_path / "index").mkdir()
    shutil.copyfile(LEGACY_CATALOG, tmp_path / "index" / LEGACY)
    return tmp_path / "index"


def searched(index: Index) -> list[tuple[str, float]]:
    return [(h.chunk.id, h.score) for query in ("gadgets Oslo", "revenue 2023", "sold")
            for h in index.keyword_search(query, 5)]


def test_a_json_catalog_is_read_as_it_is_then_migrated_by_the_first_writer(tmp_path: Path) -> None:
    folder = legacy_index(tmp_path)
    before = tree(folder)
    reader = Index(scratch_config(tmp_path))
    read = searched(reader)
    assert reader.chunk_count == 3 and sorted(reader.sources) == ["gadgets", "revenue", "widgets"]
    assert read[0][0] == "b9ef4d81d6930b72-00000" and tree(folder) == before  # a reader migrates in memory only
    report = Index(scratch_config(tmp_path)).ingest([], repair=True)  # its vectors were not kept with the test data
    assert report.repaired == 3
    assert sorted(p.name for p in folder.iterdir() if p.is_file()) == [
        ".ingest.lock", DATABASE, f"{DATABASE}-shm", f"{DATABASE}-wal"]
    migrated = Index(scratch_config(tmp_path)).require()
    assert searched(migrated) == read and migrated.sources == reader.sources
    assert Retriever(migrated).search("Where are widgets sold?", "vector")[0].source == "widgets"


def test_a_damaged_database_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / DATABASE).write_bytes(b"SQLite format 3\x00" + b"\x07" * 5000)
    with pytest.raises(UserError, match="unreadable") as refused:
        Index(scratch_config(tmp_path))
    assert "new --index" in str(refused.value) and "\n" not in str(refused.value)
    assert (tmp_path / "index" / DATABASE).read_bytes()[16:] == b"\x07" * 5000


def chunks_of(source: str, count: int) -> list[Chunk]:
    return [Chunk(f"{source}-{n:05d}", source, "Notes", 0, 40, f"Fact {n} of {source}: crates left the depot {n}.")
            for n in range(count)]


def committed(catalog: Catalog, source: str, count: int) -> None:
    with catalog.transaction():
        catalog.replace(source, "sha", "text", chunks_of(source, count))


def test_a_reader_sees_the_last_commit_while_a_writer_works_and_creates_no_file(tmp_path: Path) -> None:
    writer = Catalog(tmp_path, MODEL, writer=True)
    committed(writer, "first", 3)
    writer.close()
    writer = Catalog(tmp_path, MODEL, writer=True)
    reader = Catalog(tmp_path, MODEL)
    with writer.transaction():
        writer.replace("second", "sha", "text", chunks_of("second", 4))
        assert reader.count() == 3 and set(reader.sources()) == {"first"}
        assert {c.source for c, _ in reader.keyword_search(["crate"], 10)} == {"first"}
    assert reader.count() == 7 and len(reader.keyword_search(["crate"], 10)) == 7  # committed: now served
    writer.close()
    files = tree(tmp_path)
    reader = Catalog(tmp_path, MODEL)
    assert reader.count() == 7 and tree(tmp_path) == files


def frames_written(catalog: Catalog, source: str) -> tuple[int, int]:
    """The database pages one commit of a 20-chunk source writes (frames appended to the write-ahead log), and the
    pages the database holds."""
    with closing(sqlite3.connect(catalog.path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    committed(catalog, source, 20)
    with closing(sqlite3.connect(catalog.path)) as db:
        return db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1], db.execute("PRAGMA page_count").fetchone()[0]


def grown(catalog: Catalog, files: int) -> None:
    for _ in range(files):
        committed(catalog, f"filler{catalog.count()}", 100)


def test_a_commit_writes_what_changed_not_the_corpus(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path, MODEL, writer=True)
    grown(catalog, 10)
    small, _ = frames_written(catalog, "early")
    grown(catalog, 30)
    assert catalog.count() == 4020
    large, pages = frames_written(catalog, "late")  # at four times the corpus
    # The JSON catalog rewrote all of itself; postings merged logarithmically grow a commit by log n at most.
    assert large < 2 * small and large < pages / 10, (small, large, pages)


def test_a_json_catalog_with_a_field_the_tables_refuse_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    folder = legacy_index(tmp_path)
    catalog = json.loads((folder / LEGACY).read_text())
    catalog["sources"]["widgets"]["chunks"] = "one"
    (folder / LEGACY).write_text(json.dumps(catalog))
    before = tree(folder)
    for writer in (False, True):
        with pytest.raises(UserError, match="damaged"):
            Catalog(folder, MODEL, writer=writer)
    assert tree(folder) == before


def test_a_sample_spreads_over_the_committed_chunks_across_the_gaps_removals_leave(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path, MODEL, writer=True)
    for source in ("a", "b", "c"):
        with catalog.transaction():
            catalog.replace(source, "sha", "text", [Chunk(f"{source}{n}", source, "Notes", 0, 4, f"word {n}")
                                                    for n in range(100)])
    with catalog.transaction():
        catalog.forget("b")
    sample = catalog.sample(10)
    assert len(sample) == len(set(sample)) >= 6 and set(sample) <= catalog.ids()
    assert {"a0", "c99"} <= set(sample) and {i[0] for i in sample} == {"a", "c"}
    assert catalog.sample(1000) == sorted(catalog.ids(), key=lambda i: (i[0], int(i[1:])))
