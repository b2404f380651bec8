"""The persisted keyword index scores as rank-bm25 (Lucene idf) does, kept up to date file by file."""

from pathlib import Path

import numpy as np
import pytest

from dspy_rag.bm25 import LuceneBM25
from dspy_rag.catalog import Catalog
from dspy_rag.chunking import Chunk, chunk_document
from dspy_rag.documents import Document, Section
from dspy_rag.evals.bench_retrieval import recall_at
from dspy_rag.evals.bench_scaling import random_texts, vocabulary
from dspy_rag.tokenizer import tokenize
from dspy_rag.trainsets.corpus_index import corpus_documents
from dspy_rag.trainsets.registry import load_trainset

MODEL = "local/all-minilm-l6-v2"
K = 10
Ranking = list[tuple[Chunk, float]]


def ingest(catalog: Catalog, documents: list[Document]) -> Catalog:
    """`documents` added to the catalog, one commit each, as an ingest makes them."""
    for document in documents:
        with catalog.transaction():
            catalog.replace(document.source, "sha", document.kind, chunk_document(document, 1200, 150))
    return catalog


def reference(chunks: list[Chunk], tokens: list[str], k: int, sections: tuple[str, ...] = ()) -> Ranking:
    """rank-bm25's top k, as the index ranked before postings: every score, then a sort (stable: ties in the
    order ingested, as the postings break them)."""
    scores = LuceneBM25([tokenize(c.indexed_text) for c in chunks]).get_scores(tokens)
    if sections:
        scores = np.where([c.section in sections for c in chunks], scores, 0.0)
    return [(chunks[i], float(scores[i])) for i in np.argsort(-scores, kind="stable")[:k] if scores[i] > 0]


def assert_same(ours: Ranking, theirs: Ranking) -> None:
    """The same scores within float tolerance, and the same chunks but where two scores tie."""
    assert np.allclose([s for _, s in ours], [s for _, s in theirs], rtol=1e-9, atol=0), (ours, theirs)
    scores = [s for _, s in theirs]
    for rank, ((mine, _), (other, score)) in enumerate(zip(ours, theirs, strict=True)):
        tied = any(abs(score - s) <= 1e-9 * score for n, s in enumerate(scores) if n != rank)
        assert tied or mine.id == other.id, (rank, mine.id, other.id)


def note(source: str, **sections: str) -> Document:
    """A document with a section per keyword argument (title: body)."""
    text, spans = "", []
    for title, body in sections.items():
        block = f"# {title}\n{body}\n"
        spans.append(Section(title, len(text), len(text) + len(block)))
        text += block
    return Document(source, "markdown", text, tuple(spans))


@pytest.mark.parametrize("name", ["hotpotqa", "musique"])
def test_scores_and_recall_match_rank_bm25_on_the_real_sets(shared_data: Path, tmp_path: Path, name: str) -> None:
    trainset = load_trainset(name)
    catalog = ingest(Catalog(tmp_path, MODEL, writer=True), corpus_documents(trainset.passages))
    chunks = list(catalog.every_chunk())
    bm25 = LuceneBM25([tokenize(c.indexed_text) for c in chunks])
    ours_recall, their_recall = [], []
    questions = trainset.questions()
    for question in questions:
        tokens = tokenize(question.question)
        ours = catalog.keyword_search(tokens, 20)
        scores = bm25.get_scores(tokens)
        theirs = ranked(scores, chunks, 20)
        assert_same(ours, theirs)
        assert_same(catalog.keyword_search(tokens, 3), ranked(scores, chunks, 3))  # pruned the more, the smaller k
        gold = set(question.gold_passages)
        ours_recall.append(recall_at([c.source for c, _ in ours], gold, K))
        their_recall.append(recall_at([c.source for c, _ in theirs], gold, K))
    assert len(questions) >= 50 and len(chunks) >= 500
    assert f"{np.mean(ours_recall):.3f}" == f"{np.mean(their_recall):.3f}"


def test_replacing_and_removing_sources_scores_as_a_fresh_build_of_what_is_left(tmp_path: Path) -> None:
    catalog = ingest(Catalog(tmp_path, MODEL, writer=True), [
        note("a", Sales="Widgets are sold in Norway and Sweden.", Risks="Competitors may copy our widgets."),
        note("b", Sales="Gadgets are sold in Chile; widgets in Peru.", Offices="The Oslo office employs 42."),
        note("c", Risks="Gadget prices may fall.", Sales="Sold: 300 widgets, 12 gadgets."),
    ])
    ingest(catalog, [note("b", Sales="Gizmos are sold in Chile.", Offices="The Lima office employs 7 engineers.")])
    with catalog.transaction():
        catalog.forget("a")
    chunks = list(catalog.every_chunk())
    assert {c.source for c in chunks} == {"b", "c"}
    for query in ("widgets sold", "gadgets gizmos Chile", "office engineers", "sold sold widgets", "nothing here"):
        tokens = tokenize(query)
        assert_same(catalog.keyword_search(tokens, 5), reference(chunks, tokens, 5))
        assert_same(catalog.keyword_search(tokens, 5, ("Sales",)), reference(chunks, tokens, 5, ("Sales",)))
    assert catalog.keyword_search(tokenize("norway"), 5) == []  # only in the source removed


def zipf_chunks(rng: np.random.Generator, words: np.ndarray, source: str, first: int, count: int) -> list[Chunk]:
    """Chunks of Zipf-distributed words, in two sections: a few words in nearly every chunk, most in few."""
    return [Chunk(f"{source}-{first + n}", source, ("Sales", "Risks")[n % 2], 0, len(text), text)
            for n, text in enumerate(random_texts(rng, words, count, 60))]


def ranked(scores: np.ndarray, chunks: list[Chunk], k: int) -> Ranking:
    """The top k of every chunk's score, ties in the order ingested."""
    return [(chunks[i], float(scores[i])) for i in np.argsort(-scores, kind="stable")[:k] if scores[i] > 0]


def test_pruned_search_ranks_as_rank_bm25_with_common_words_removed_chunks_and_sections(tmp_path: Path) -> None:
    """Queries of common words, whose terms the search skips over for most chunks, and rare ones, at several k:
    the same top k and scores as scoring every chunk, also with dead postings and a section filter."""
    rng = np.random.default_rng(7)
    words = vocabulary(rng)[:800]
    catalog = Catalog(tmp_path, MODEL, writer=True)
    for source in ("a", "b", "c"):
        with catalog.transaction():
            catalog.replace(source, "sha", "text", zipf_chunks(rng, words, source, 0, 500))
    with catalog.transaction():  # postings of the chunks it superseded stay in their blocks, dead
        catalog.replace("b", "sha2", "text", zipf_chunks(rng, words, "b", 500, 250))
    chunks = list(catalog.every_chunk())
    bm25 = LuceneBM25([tokenize(c.indexed_text) for c in chunks])
    risks = np.array([c.section == "Risks" for c in chunks])
    for size in (1, 2, 4, 8, 12):
        for query in random_texts(rng, words, 8, size):
            tokens = tokenize(query)
            scores = bm25.get_scores(tokens)
            for k in (1, 5, 20):
                assert_same(catalog.keyword_search(tokens, k), ranked(scores, chunks, k))
                assert_same(catalog.keyword_search(tokens, k, ("Risks",)), ranked(np.where(risks, scores, 0.0), chunks, k))
