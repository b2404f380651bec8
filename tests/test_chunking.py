"""Chunking the real 10-K: exact offsets, section bounds, no lost text, stable ids, overlap."""

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from dspy_rag.chunking import Chunk, chunk_document
from dspy_rag.documents import Document, Section, read_html

SETTINGS = [(1000, 150), (1000, 0), (300, 60)]


@pytest.fixture(scope="module")
def tenk(tenk_filing: Path) -> Document:
    return read_html(tenk_filing.read_bytes(), str(tenk_filing))


@pytest.fixture(scope="module", params=SETTINGS, ids=lambda p: f"size{p[0]}-overlap{p[1]}")
def chunked(request: pytest.FixtureRequest, tenk: Document) -> tuple[int, int, list[Chunk]]:
    size, overlap = request.param
    return size, overlap, chunk_document(tenk, size=size, overlap=overlap)


def section_of(document: Document, chunk: Chunk) -> Section:
    return next(s for s in document.sections if s.start <= chunk.start < s.end)


def one_section(text: str) -> Document:
    return Document("t.txt", "text", text, (Section("t", 0, len(text)),))


def test_chunk_text_matches_offsets(tenk: Document, chunked: tuple[int, int, list[Chunk]]) -> None:
    chunks = chunked[2]
    assert len(chunks) > 100
    for chunk in chunks:
        assert chunk.text == tenk.text[chunk.start : chunk.end]
        assert chunk.text == chunk.text.strip() and chunk.text


def test_chunks_stay_inside_their_section(tenk: Document, chunked: tuple[int, int, list[Chunk]],
                                         tenk_filing: Path) -> None:
    for chunk in chunked[2]:
        section = section_of(tenk, chunk)
        assert chunk.section == section.title
        assert chunk.end <= section.end
        assert chunk.source == str(tenk_filing)


def test_chunks_respect_size(chunked: tuple[int, int, list[Chunk]]) -> None:
    size, _, chunks = chunked
    assert max(len(c.text) for c in chunks) <= size
    # Breaks fall back to the middle of the window at worst, so chunks are not needlessly tiny.
    assert sum(len(c.text) >= size // 2 for c in chunks) > 0.8 * len(chunks)


def test_no_text_is_lost(tenk: Document, chunked: tuple[int, int, list[Chunk]]) -> None:
    covered = bytearray(len(tenk.text))
    for chunk in chunked[2]:
        covered[chunk.start : chunk.end] = b"\x01" * (chunk.end - chunk.start)
    lost = next((i for i, char in enumerate(tenk.text) if not covered[i] and not char.isspace()), None)
    assert lost is None, f"uncovered text near {tenk.text[lost - 40 : lost + 40]!r}"


def test_ids_unique_and_stable(tenk: Document, chunked: tuple[int, int, list[Chunk]]) -> None:
    size, overlap, chunks = chunked
    ids = [c.id for c in chunks]
    assert len(set(ids)) == len(ids)
    assert [c.id for c in chunk_document(tenk, size=size, overlap=overlap)] == ids


@pytest.mark.parametrize(
    "change",
    [
        lambda d: replace(d, source="copy-of-" + d.source),
        # Same length, so the sections still tile the changed text.
        lambda d: replace(d, text=d.text.replace("$15.01 billion", "$15.02 billion")),
    ],
    ids=["source", "text"],
)
def test_ids_change_with_source_or_text(tenk: Document, change: Callable[[Document], Document]) -> None:
    changed = change(tenk)
    assert changed != tenk
    before = {c.id for c in chunk_document(tenk)}
    after = {c.id for c in chunk_document(changed)}
    assert before.isdisjoint(after)


@pytest.mark.parametrize("overlap", [0, 150])
def test_overlap_between_consecutive_chunks(tenk: Document, overlap: int) -> None:
    (risk,) = [s for s in tenk.sections if s.title.startswith("Item 1A. ")]
    chunks = [c for c in chunk_document(tenk, size=1000, overlap=overlap) if c.section == risk.title]
    assert len(chunks) > 50
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert after.start > before.start
        shared = before.end - after.start
        if overlap:
            assert 0 < shared <= overlap
            assert tenk.text[after.start - 1].isspace(), "an overlapping chunk restarts on a word boundary"
        else:
            assert shared <= 0


@pytest.mark.parametrize(("size", "overlap"), [(100, 100), (100, 150)])
def test_overlap_not_smaller_than_size_is_rejected(tenk: Document, size: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        chunk_document(tenk, size=size, overlap=overlap)


@pytest.mark.parametrize(
    ("text", "size", "first"),
    [
        # A paragraph break wins over a later sentence break in the same window.
        ("Revenue rose sharply this year.\nMargins fell. Costs grew across every segment of the business",
         60, "Revenue rose sharply this year."),
        ("Revenue rose sharply this year and margins fell. Costs grew across every segment of the business",
         60, "Revenue rose sharply this year and margins fell."),
        # No sentence break: cut between words, never inside one.
        ("Revenue rose sharply this year while margins and costs grew across every segment",
         40, "Revenue rose sharply this year while"),
    ],
    ids=["paragraph", "sentence", "word"],
)
def test_break_points_prefer_strong_boundaries(text: str, size: int, first: str) -> None:
    chunks = chunk_document(one_section(text), size=size, overlap=0)
    assert chunks[0].text == first
    assert " ".join(c.text for c in chunks).split() == text.split()


def test_small_sections_become_whole_chunks() -> None:
    text = "Alpha part one.\n\nBeta part two.\n"
    boundary = text.index("Beta")
    document = Document("t.md", "markdown", text, (Section("A", 0, boundary), Section("B", boundary, len(text))))
    chunks = chunk_document(document, size=200, overlap=50)
    assert [(c.section, c.text, c.start, c.end) for c in chunks] == [
        ("A", "Alpha part one.", 0, 15),
        ("B", "Beta part two.", boundary, boundary + 14),
    ]
