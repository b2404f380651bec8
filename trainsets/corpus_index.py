"""A trainset's corpus as an index of its own, built once per corpus and reused by `bench retrieval`, `compile`
and `eval`, and the held-out split of its questions."""

import hashlib
import tempfile
from collections.abc import Sequence
from pathlib import Path

from dspy_rag.config import Config
from dspy_rag.documents import Document, Section
from dspy_rag.errors import UserError
from dspy_rag.index import Index, ProgressFn
from dspy_rag.trainsets.formats import CorpusPassage, Question


def is_held_out(question: Question, share: float) -> bool:
    bucket = int(hashlib.sha256(question.id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return bucket < share


def corpus_documents(passages: list[CorpusPassage]) -> list[Document]:
    """One document per passage, its source the passage id, so a retrieved chunk names its gold id."""
    documents = []
    for passage in passages:
        text = passage.indexed_text
        documents.append(Document(passage.id, "text", text, (Section(passage.title, 0, len(text)),)))
    return documents


def build_index(config: Config, passages: list[CorpusPassage], progress: ProgressFn) -> Index:
    """Ingest the corpus; a rerun finds every passage unchanged, so an index built before is reused."""
    index = Index(config)
    ids = {p.id for p in passages}
    foreign = [s for s in index.sources if s not in ids]
    if foreign:
        raise UserError(f"{index.root} holds {len(foreign)} passages of another corpus; pass a fresh --work folder")
    index.ingest_documents(corpus_documents(passages), progress)
    return index


def sha256_of(files: Sequence[Path]) -> str:
    """The sha256 of the files' bytes, one after the other."""
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.read_bytes())
    return digest.hexdigest()


def default_work_dir(*corpus: Path) -> Path:
    """Keyed by the corpus bytes, so reruns on the same corpus reuse the index and a new corpus gets its own;
    compile and eval find here the index `bench retrieval` built for the same corpus."""
    return Path(tempfile.gettempdir()) / f"dspy-rag-bench-{sha256_of(corpus)[:12]}"
