"""Section-aware chunking: chunks never cross a section boundary and keep exact character offsets."""

import hashlib
import re
from dataclasses import dataclass

from dspy_rag.documents import Document, Section

CHUNK_ID = re.compile(r"[0-9a-f]{16}-[0-9]{5,}")  # what chunk_document names a chunk: its document's digest, its number


@dataclass(frozen=True)
class Chunk:
    id: str
    source: str
    section: str
    start: int
    end: int
    text: str

    @property
    def metadata(self) -> dict[str, str | int]:
        return {"source": self.source, "section": self.section, "start": self.start, "end": self.end}

    @property
    def indexed_text(self) -> str:
        """What embeddings and BM25 see: the section title gives a chunk the context its text lacks."""
        return f"{self.section}\n{self.text}"


def _break_point(text: str, lo: int, hi: int) -> int:
    """The last paragraph, sentence or word break in text[lo:hi], preferring the strongest one."""
    floor = lo + (hi - lo) // 2
    for separator in ("\n", ". ", "; ", " "):
        cut = text.rfind(separator, floor, hi)
        if cut != -1:
            return cut + len(separator)
    return hi


def _spans(text: str, section: Section, size: int, overlap: int) -> list[tuple[int, int]]:
    spans, start = [], section.start
    while start < section.end:
        while start < section.end and text[start].isspace():
            start += 1
        if start >= section.end:
            break
        end = section.end if section.end - start <= size else _break_point(text, start, start + size)
        spans.append((start, end))
        if end >= section.end:
            break
        # Step back by the overlap but restart on a word boundary, and always move forward.
        back = max(end - overlap, start + 1)
        space = text.find(" ", back, end)
        start = space + 1 if overlap and space != -1 else end
    return spans


def chunk_document(document: Document, size: int = 1000, overlap: int = 150) -> list[Chunk]:
    if overlap >= size:
        raise ValueError("chunk overlap must be smaller than the chunk size")
    # Ids depend on source and content: a changed file gets new ids, two copies of a file do not collide.
    digest = hashlib.sha256(f"{document.source}\0{document.text}".encode()).hexdigest()[:16]
    chunks = []
    for section in document.sections:
        for start, end in _spans(document.text, section, size, overlap):
            body = document.text[start:end].rstrip()
            if body:
                chunk_id = f"{digest}-{len(chunks):05d}"
                chunks.append(Chunk(chunk_id, document.source, section.title, start, start + len(body), body))
    return chunks
