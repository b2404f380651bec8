"""The index against real Chroma and real embeddings: ingest, re-ingest, replacement, interruption."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import assert_one_line_error, run_cli, scratch_config
from dspy_rag.catalog import DATABASE as CATALOG
from dspy_rag.errors import UserError
from dspy_rag.index import Index
from dspy_rag.retrieval import Retriever

QUESTION = "What was NVIDIA's Data Center revenue in fiscal year 2023?"


INDEX = ".dspy-rag/index"  # the default index folder, under the working folder


def write_notes(folder: Path, body: str = "Widgets are sold in Norway.") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "notes.md"
    path.write_text(f"# Sales\n{body}\n\n# Risks\nCompetitors may copy our gadgets.\n")
    return path


def stored_ids(index: Index) -> set[str]:
    return set(index.collection.get(include=[])["ids"])


@pytest.mark.slow
def test_tenk_index_finds_the_data_center_revenue_sentence(tenk_index: Index) -> None:
    retriever = Retriever(tenk_index, top_k=10)
    for strategy in ("vector", "keyword", "hybrid"):
        top = retriever.search(QUESTION, strategy)[:4]
        assert any("$15.01 billion" in p.text for p in top), strategy
    sections = tenk_index.sources[next(iter(tenk_index.sources))]["sections"]
    for item in ("Item 1.", "Item 1A.", "Item 2.", "Item 7.", "Item 7A.", "Item 8."):
        assert any(s.startswith(item) for s in sections), item


@pytest.mark.slow
def test_catalog_and_chroma_agree(tenk_index: Index) -> None:
    assert stored_ids(tenk_index) == tenk_index.catalog.ids()
    assert tenk_index.chunk_count > 300


def test_reingesting_an_unchanged_file_changes_nothing(tmp_path: Path) -> None:
    notes = write_notes(tmp_path / "docs")
    index = Index(scratch_config(tmp_path))
    index.ingest([str(notes)])
    before = index.catalog_path.read_bytes()
    ids = stored_ids(index)
    report = Index(scratch_config(tmp_path)).ingest([str(notes)])
    assert report.unchanged == [str(notes.resolve())] and not report.added and report.chunks_written == 0
    assert index.catalog_path.read_bytes() == before
    assert stored_ids(Index(scratch_config(tmp_path))) == ids


def test_a_changed_file_replaces_its_chunks(tmp_path: Path) -> None:
    notes = write_notes(tmp_path / "docs")
    index = Index(scratch_config(tmp_path))
    index.ingest([str(notes)])
    old = stored_ids(index)
    write_notes(tmp_path / "docs", body="Gizmos are sold in Chile.")
    fresh = Index(scratch_config(tmp_path))
    report = fresh.ingest([str(notes)])
    assert report.replaced == [str(notes.resolve())]
    assert not old & stored_ids(fresh)
    texts = " ".join(chunk.text for chunk in fresh.chunks())
    assert "Gizmos" in texts and "Widgets" not in texts
    assert Retriever(fresh).search("gizmos chile", "keyword")[0].text.startswith("# Sales")


def test_an_interrupted_ingest_leaves_the_previous_index_usable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    notes = write_notes(tmp_path / "docs")
    Index(scratch_config(tmp_path)).ingest([str(notes)])
    catalog = (tmp_path / "index" / CATALOG).read_bytes()
    write_notes(tmp_path / "docs", body="Gizmos are sold in Chile.")
    crashing = Index(scratch_config(tmp_path))

    def crash(*_: object) -> None:
        raise KeyboardInterrupt  # as if the user pressed Ctrl-C after the new vectors were written

    monkeypatch.setattr(crashing, "_commit", crash)
    with pytest.raises(KeyboardInterrupt):
        crashing.ingest([str(notes)])
    assert (tmp_path / "index" / CATALOG).read_bytes() == catalog
    survivor = Index(scratch_config(tmp_path))
    assert len(stored_ids(survivor)) > survivor.chunk_count  # the uncommitted vectors are there
    hits = Retriever(survivor).search("Which goods are sold?", "vector")
    assert hits and all("Gizmos" not in p.text for p in hits)  # but never served
    monkeypatch.undo()
    Index(scratch_config(tmp_path)).ingest([str(notes)])
    final = Index(scratch_config(tmp_path))
    assert stored_ids(final) == final.catalog.ids()  # leftovers swept


def test_folders_skip_unsupported_files_and_survive_symlink_loops(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write_notes(docs)
    (docs / "image.png").write_bytes(b"\x89PNG\r\n")
    (docs / "loop").symlink_to(docs, target_is_directory=True)
    (docs / "sub").mkdir()
    (docs / "sub" / "more.txt").write_text("Gadgets ship from Oslo.")
    report = Index(scratch_config(tmp_path)).ingest([str(docs)])
    assert sorted(Path(s).name for s in report.added) == ["more.txt", "notes.md"]
    assert [Path(s).name for s in report.skipped] == ["image.png"]


def test_a_bad_file_in_a_folder_is_reported_and_the_rest_ingested(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write_notes(docs)
    (docs / "broken.txt").write_bytes(b"\x00\x01binary")
    report = Index(scratch_config(tmp_path)).ingest([str(docs)])
    assert [Path(s).name for s in report.added] == ["notes.md"]
    assert list(report.failed) == [str(docs / "broken.txt")] and "binary" in report.failed[str(docs / "broken.txt")]


@pytest.mark.parametrize("make", [
    lambda d: d / "missing.md",
    lambda d: (d / "blob.txt").write_bytes(b"\x00" * 64) and d / "blob.txt",
    lambda d: (d / "fake.pdf").write_text("not a pdf") and d / "fake.pdf",
    lambda d: (d / "data.xlsx").write_text("x") and d / "data.xlsx",
])
def test_bad_input_leaves_the_index_intact(tmp_path: Path, make) -> None:
    Index(scratch_config(tmp_path)).ingest([str(write_notes(tmp_path / "docs"))])
    catalog = (tmp_path / "index" / CATALOG).read_bytes()
    index = Index(scratch_config(tmp_path))
    ids = stored_ids(index)
    with pytest.raises(UserError) as error:
        index.ingest([str(make(tmp_path / "docs"))])
    assert "\n" not in str(error.value)
    assert (tmp_path / "index" / CATALOG).read_bytes() == catalog
    assert stored_ids(Index(scratch_config(tmp_path))) == ids


def test_a_corrupt_catalog_is_refused_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "catalog.json").write_text("{ truncated")
    with pytest.raises(UserError, match="unreadable"):
        Index(scratch_config(tmp_path))
    assert (tmp_path / "index" / "catalog.json").read_text() == "{ truncated"


def test_an_index_built_with_another_embedding_model_is_refused(tmp_path: Path) -> None:
    Index(scratch_config(tmp_path)).ingest([str(write_notes(tmp_path / "docs"))])
    with pytest.raises(UserError, match="embedding model"):
        Index(scratch_config(tmp_path, **{"embedding.model": "sentence-transformers/all-mpnet-base-v2"}))


def test_a_missing_index_says_to_ingest(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="dspy-rag ingest"):
        Index(scratch_config(tmp_path)).require()


def test_a_second_writer_is_refused_while_one_holds_the_lock(tmp_path: Path) -> None:
    first, second = Index(scratch_config(tmp_path)), Index(scratch_config(tmp_path))
    with first._writer_lock():
        with pytest.raises(UserError, match="another ingest"):
            second.ingest([str(write_notes(tmp_path / "docs"))])


def test_the_catalog_stores_offsets_into_the_parsed_text(tmp_path: Path) -> None:
    notes = write_notes(tmp_path / "docs")
    index = Index(scratch_config(tmp_path))
    index.ingest([str(notes)])
    chunks = list(Index(scratch_config(tmp_path)).chunks())
    source = notes.read_text()
    assert all(source[chunk.start : chunk.end] == chunk.text for chunk in chunks)
    assert {chunk.section for chunk in chunks} == {"Sales", "Risks"}
    assert not any("staging" in name for name in os.listdir(tmp_path / "index"))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["vector", "keyword", "hybrid"])
def test_a_section_filter_keeps_results_inside_the_section(tenk_index: Index, strategy: str) -> None:
    passages = Retriever(tenk_index, top_k=8).search("competition from AMD and Intel", strategy, section="risk factors")
    assert passages and {p.section for p in passages} == {"Item 1A. Risk Factors"}


@pytest.mark.slow
def test_an_unknown_section_searches_everything(tenk_index: Index) -> None:
    retriever = Retriever(tenk_index, top_k=5)
    assert retriever.search(QUESTION, "hybrid", section="Item 99") == retriever.search(QUESTION, "hybrid")


@pytest.mark.slow
def test_several_queries_are_fused_and_deduplicated(tenk_index: Index) -> None:
    retriever = Retriever(tenk_index, top_k=10)
    queries = ["Data Center revenue fiscal 2023", "Gaming revenue fiscal 2023"]
    fused = retriever.search(queries, "keyword")
    texts = [p.text for p in fused]
    assert any("$15.01 billion" in t for t in texts) and any("$9.07 billion" in t for t in texts)
    assert len({p.id for p in fused}) == len(fused) == len(set(texts))
    assert [p.score for p in fused] == sorted((p.score for p in fused), reverse=True)


def test_the_same_text_under_two_sources_is_returned_once(tmp_path: Path) -> None:
    first, second = write_notes(tmp_path / "a"), write_notes(tmp_path / "b")
    index = Index(scratch_config(tmp_path))
    index.ingest([str(first), str(second)])
    assert index.chunk_count == 4  # two files, two sections each
    passages = Retriever(index, top_k=10).search("widgets sold in Norway", "hybrid")
    assert len(passages) == 2 and len({p.text for p in passages}) == 2


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["folder deleted", "some vectors deleted"])
def test_a_lost_vector_store_is_an_error_naming_the_repair_which_mends_it(tmp_path: Path, loss: str) -> None:
    notes = write_notes(tmp_path / "docs", "\n\n".join(f"# Part {n}\n" + f"Fact {n} is here. " * 60
                                                        for n in range(6)))
    assert run_cli("ingest", str(notes), cwd=tmp_path).returncode == 0
    ids = Index(scratch_config(tmp_path, **{"index.path": tmp_path / INDEX})).catalog.ids()
    if loss == "folder deleted":
        shutil.rmtree(tmp_path / INDEX / "chroma")
    else:  # in another process, as a damaged store would be found
        store = str(tmp_path / INDEX / "chroma")
        subprocess.run([sys.executable, "-c", f"import chromadb; chromadb.PersistentClient({store!r})"
                        f".get_collection('documents').delete(ids={sorted(ids)[:2]!r})"], check=True)
    catalog = (tmp_path / INDEX / CATALOG).read_bytes()
    for command in (("ask", "Which fact is here?"), ("ingest", str(notes))):  # "unchanged" would hide the loss
        assert_one_line_error(run_cli(*command, cwd=tmp_path), "ingest --repair", f"for the {len(ids)} chunks")
    assert (tmp_path / INDEX / CATALOG).read_bytes() == catalog  # the catalog is left as it was
    repaired = run_cli("ingest", "--repair", "--json", cwd=tmp_path)
    assert repaired.returncode == 0, repaired.stderr
    assert json.loads(repaired.stdout)["repaired"] == (len(ids) if loss == "folder deleted" else 2)
    index = Index(scratch_config(tmp_path, **{"index.path": tmp_path / INDEX})).require()
    assert stored_ids(index) == ids
