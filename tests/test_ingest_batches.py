"""A large file's ingest: embedded and upserted a batch at a time, its postings built a batch at a time, committed
once; and the progress bar's time left, estimated from each stage's own pace."""

from pathlib import Path
from typing import Any

import pytest
from chromadb.api.models.Collection import Collection
from rich.progress import Progress

from conftest import scratch_config
from dspy_rag import catalog, index
from dspy_rag.catalog import DATABASE as CATALOG
from dspy_rag.cli.console import StageBar
from dspy_rag.index import Index

SMALL = {"ingest.chunk_chars": 200, "ingest.chunk_overlap": 20}  # many chunks from a short file


def long_notes(folder: Path, word: str = "widgets") -> Path:
    """A text file of some 30 chunks of SMALL size, each paragraph naming its number."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "long.txt"
    path.write_text("".join(f"Paragraph {n}: the {word} of plant {n} ship from harbour {n} every week of the year.\n\n"
                            for n in range(60)))
    return path


class Recorder:
    """Counts the chunks of each upsert to Chroma and the catalog's commits; with `fail_at`, that upsert (counted
    from 0) is interrupted as if Ctrl-C came between two batches."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail_at: int | None = None) -> None:
        self.upserts: list[int] = []
        self.commits = 0
        upsert, commit = Collection.upsert, Index._commit

        def counted_upsert(collection: Collection, **kwargs: Any) -> None:
            if len(self.upserts) == fail_at:
                raise KeyboardInterrupt
            self.upserts.append(len(kwargs["ids"]))
            upsert(collection, **kwargs)

        def counted_commit(store: Index) -> Any:
            self.commits += 1
            return commit(store)

        monkeypatch.setattr(Collection, "upsert", counted_upsert)
        monkeypatch.setattr(Index, "_commit", counted_commit)


def test_a_file_of_many_batches_is_upserted_batch_by_batch_and_committed_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index, "EMBED_BATCH", 8)
    monkeypatch.setattr(catalog, "POSTINGS_BATCH", 5)
    notes = long_notes(tmp_path / "docs")
    recorder = Recorder(monkeypatch)
    stages: list[tuple[str, int, int]] = []
    report = Index(scratch_config(tmp_path, **SMALL)).ingest([str(notes)], lambda *call: stages.append(call))
    chunks = report.chunks_written
    assert chunks > 3 * 8 and recorder.commits == 1
    assert recorder.upserts == [8] * (chunks // 8) + ([chunks % 8] if chunks % 8 else [])
    embedding = [(done, total) for stage, done, total in stages if stage == "embedding long.txt"]
    assert embedding[0] == (0, chunks) and embedding[-1] == (chunks, chunks)
    assert len(embedding) == len(recorder.upserts) + 1
    assert [stage for stage, *_ in stages][-1] == "committing long.txt"
    # Postings built five chunks at a time score as one build of them all does.
    monkeypatch.setattr(catalog, "POSTINGS_BATCH", 10_000)
    whole = Index(scratch_config(tmp_path / "whole", **SMALL))
    whole.ingest([str(notes)])
    fresh = Index(scratch_config(tmp_path, **SMALL))
    assert fresh.chunk_count == whole.chunk_count == chunks
    for query in ("plant 57 harbour", "widgets week", "paragraph 3"):
        batched = [(h.chunk.start, round(h.score, 9)) for h in fresh.keyword_search(query, 5)]
        assert batched == [(h.chunk.start, round(h.score, 9)) for h in whole.keyword_search(query, 5)], query


def test_an_ingest_interrupted_between_batches_leaves_the_last_commit_and_is_swept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index, "EMBED_BATCH", 8)
    monkeypatch.setattr(catalog, "POSTINGS_BATCH", 5)
    notes = long_notes(tmp_path / "docs")
    Index(scratch_config(tmp_path, **SMALL)).ingest([str(notes)])
    committed = (tmp_path / "index" / CATALOG).read_bytes()
    long_notes(tmp_path / "docs", word="gizmos")
    with monkeypatch.context() as patch:
        Recorder(patch, fail_at=2)
        with pytest.raises(KeyboardInterrupt):
            Index(scratch_config(tmp_path, **SMALL)).ingest([str(notes)])
    assert (tmp_path / "index" / CATALOG).read_bytes() == committed
    survivor = Index(scratch_config(tmp_path, **SMALL))
    stored = set(survivor.collection.get(include=[])["ids"])
    assert len(stored) == survivor.chunk_count + 16  # two batches of the new file's vectors, never committed
    assert all("gizmos" not in h.chunk.text for h in survivor.vector_search("gizmos of the plant", 10))
    report = Index(scratch_config(tmp_path, **SMALL)).ingest([str(notes)])
    final = Index(scratch_config(tmp_path, **SMALL))
    assert report.replaced == [str(notes.resolve())]
    assert set(final.collection.get(include=[])["ids"]) == final.catalog.ids()  # the leftovers swept
    # The old file's postings removed five chunks at a time: the keyword scores are a fresh index's.
    Index(scratch_config(tmp_path / "fresh", **SMALL)).ingest([str(notes)])
    fresh = Index(scratch_config(tmp_path / "fresh", **SMALL))
    for query in ("gizmos plant 7", "harbour 41 week"):
        assert ([(h.chunk.start, round(h.score, 9)) for h in final.keyword_search(query, 5)]
                == [(h.chunk.start, round(h.score, 9)) for h in fresh.keyword_search(query, 5)]), query


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_time_left_is_estimated_from_the_current_stage_alone() -> None:
    clock = Clock()
    display = Progress(get_time=clock, disable=True)
    bar = StageBar(display)

    def at(seconds: float, stage: str, done: int, total: int) -> None:
        clock.now = seconds
        bar(stage, done, total)

    at(0, "reading a.txt", 0, 2)
    at(1, "embedding a.txt", 0, 1000)
    at(11, "embedding a.txt", 500, 1000)
    at(21, "embedding a.txt", 1000, 1000)  # 50 chunks a second
    at(22, "committing a.txt", 0, 0)
    assert [(task.description, task.total) for task in display.tasks] == [("committing a.txt", None)]
    at(30, "reading b.txt", 1, 2)
    at(31, "embedding b.txt", 0, 400)
    at(41, "embedding b.txt", 100, 400)
    task = display.tasks[0]
    assert task.time_remaining is None  # one batch is no pace yet
    at(51, "embedding b.txt", 200, 400)  # 10 chunks a second: the file before went faster
    assert (task.description, task.completed, task.total) == ("embedding b.txt", 200, 400)
    assert task.time_remaining == 20
