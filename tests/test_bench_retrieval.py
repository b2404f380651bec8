"""The retrieval benchmark: its metrics by hand, its corpus mapping, a real run on a HotpotQA slice, scaling."""

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dspy_rag.cli.bench import bench_app
from dspy_rag.errors import UserError
from dspy_rag.evals.bench_retrieval import (
    BRIDGE_ONLY,
    NO_BRIDGE,
    RERANKED,
    all_gold_at,
    recall_at,
    run,
)
from dspy_rag.evals.bench_scaling import scaling
from dspy_rag.retrieval import Passage
from dspy_rag.trainsets.corpus_index import corpus_documents
from dspy_rag.trainsets.formats import CorpusPassage, load_questions, passage_id

# --- metrics -----------------------------------------------------------------------------------------


def test_recall_counts_gold_among_the_first_k():
    assert recall_at(["a", "b", "c", "d"], {"a", "c"}, 1) == 0.5
    assert recall_at(["a", "b", "c", "d"], {"a", "c"}, 2) == 0.5
    assert recall_at(["a", "b", "c", "d"], {"a", "c"}, 3) == 1.0
    assert recall_at(["x", "y"], {"a", "b", "c"}, 10) == 0.0
    assert recall_at([], {"a"}, 5) == 0.0


def test_recall_counts_a_passage_split_into_chunks_once():
    # Distinct ids: a, b, c, d; the repeated a and b must not push c out of the top 3.
    ranked = ["a", "a", "b", "a", "b", "c", "d"]
    assert recall_at(ranked, {"c"}, 3) == 1.0
    assert recall_at(ranked, {"d"}, 3) == 0.0
    assert recall_at(ranked, {"a", "b", "c", "d"}, 2) == 0.5
    assert recall_at(["a", "a", "a"], {"a", "b"}, 2) == 0.5


def test_all_gold_needs_every_hop_in_the_top_ten():
    ranked = [f"p{i}" for i in range(12)]
    assert all_gold_at(ranked, {"p0", "p9"})
    assert not all_gold_at(ranked, {"p0", "p10"})
    assert all_gold_at(["g"] * 11 + ["h"], {"g", "h"})  # duplicates do not use up the ten


def test_recall_refuses_a_question_without_gold():
    with pytest.raises(ValueError):
        recall_at(["a"], set(), 5)


def test_corpus_documents_keep_the_passage_id_as_source():
    passages = [CorpusPassage("id-1", "Paris", "Paris is the capital of France."), CorpusPassage("id-2", "Rome", "")]
    documents = corpus_documents(passages)
    assert [d.source for d in documents] == ["id-1", "id-2"]
    first = documents[0]
    assert first.kind == "text"
    assert first.text == "Paris\nParis is the capital of France."
    assert [(s.title, s.start, s.end) for s in first.sections] == [("Paris", 0, len(first.text))]


# --- a real run on a HotpotQA slice ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def hotpot_slice(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> tuple[Path, Path, Path]:
    """The first 8 HotpotQA questions and only the passages they show (gold + distractors), original formats.
    Its tests are slow: the first to run indexes the passages, the rest reuse that index."""
    folder = tmp_path_factory.mktemp("hotpot")
    rows = json.loads((shared_data / "hotpotqa" / "questions.json").read_text())[:8]
    questions = folder / "questions.json"
    questions.write_text(json.dumps(rows))
    _, loaded = load_questions(questions)
    wanted = {i for q in loaded for i in (*q.gold_passages, *q.distractors)}
    full = json.loads((shared_data / "hotpotqa" / "corpus.json").read_text())
    corpus = folder / "corpus.json"
    corpus.write_text(json.dumps({t: s for t, s in full.items() if passage_id(t, "".join(s)) in wanted}))
    return questions, corpus, folder / "index"


@dataclass
class ReversingReranker:
    """Puts the hybrid ranking upside down and remembers what it returned, so the test can re-score it."""

    name: str = "reverse"
    settings: dict[str, object] = field(default_factory=lambda: {"architecture": "reverse"})
    returned: dict[str, list[Passage]] = field(default_factory=dict)

    def rerank(self, query: str, passages: list[Passage], top_n: int) -> list[Passage]:
        self.returned[query] = passages[::-1][:top_n]
        return self.returned[query]


@pytest.mark.slow
def test_run_scores_every_strategy_on_real_questions(hotpot_slice):
    questions, corpus, work = hotpot_slice
    result = run(questions, corpus, work, top_k=20)
    assert result["format"] == "hotpotqa"
    assert result["questions"] == 8 and result["gold_missing_from_corpus"] == 0
    assert 70 <= result["corpus_passages"] <= 80 and result["chunks"] >= result["corpus_passages"]
    assert set(result["strategies"]) == {"vector", "keyword", "hybrid"}
    assert result["reranker"] is None and result["rerank_gain_recall@5"] is None
    for row in result["strategies"].values():
        assert 0.0 <= row["recall@2"] <= row["recall@5"] <= row["recall@10"] <= 1.0
        assert row["all_in_top10"] <= row["recall@10"]
        assert 0 < row["latency_ms"]["median"] <= row["latency_ms"]["p90"]
    # Two-hop questions over 10 passages each: a working retriever finds most gold passages in its top 10.
    assert result["strategies"]["hybrid"]["recall@10"] >= 0.7
    assert result["best_single"] in result["strategies"]


@pytest.mark.slow
def test_run_scores_the_reranked_order(hotpot_slice):
    questions, corpus, work = hotpot_slice
    reranker = ReversingReranker()
    result = run(questions, corpus, work, reranker=reranker, top_k=20, limit=5)
    assert result["index_seconds"] < 30  # the index of the previous test is reused, not rebuilt
    row = result["strategies"][RERANKED]
    _, loaded = load_questions(questions)
    gold = {q.question: set(q.gold_passages) for q in loaded[:5]}
    assert set(reranker.returned) == set(gold)
    for k in (2, 5, 10):
        expected = sum(recall_at([p.source for p in reranker.returned[q]], gold[q], k) for q in gold) / len(gold)
        assert row[f"recall@{k}"] == pytest.approx(expected, abs=1e-4)
    assert row["rerank_ms"]["median"] >= 0 and row["latency_ms"]["median"] > 0
    assert result["reranker"] == "reverse" and result["reranker_settings"] == {"architecture": "reverse"}
    assert set(result["strategies"]) == {"vector", "keyword", "hybrid", RERANKED}  # no halves: it does not bridge
    best = result["best_single"]
    for baseline, key in ((best, "rerank_gain_recall@5"), ("hybrid", "rerank_gain_over_hybrid_recall@5")):
        gain = result["strategies"][RERANKED]["recall@5"] - result["strategies"][baseline]["recall@5"]
        assert result[key] == pytest.approx(gain, abs=1e-4)


@dataclass
class BridgingReversingReranker(ReversingReranker):
    """Says it bridges, but its order is the reversal either way: without the bridge it must score the same."""

    bridge: bool = True

    def reorder(self, query: str, passages: list[Passage], bridge: bool) -> list[Passage]:
        return passages[::-1]


@pytest.mark.slow
def test_a_bridging_reranker_is_also_scored_by_halves(hotpot_slice):
    questions, corpus, work = hotpot_slice
    result = run(questions, corpus, work, reranker=BridgingReversingReranker(), top_k=20, limit=5)
    rows = result["strategies"]
    assert set(rows) == {"vector", "keyword", "hybrid", RERANKED, NO_BRIDGE, BRIDGE_ONLY}
    assert all(rows[NO_BRIDGE][f"recall@{k}"] == rows[RERANKED][f"recall@{k}"] for k in (2, 5, 10))
    assert 0.0 <= rows[BRIDGE_ONLY]["recall@2"] <= rows[BRIDGE_ONLY]["recall@5"] <= rows[BRIDGE_ONLY]["recall@10"]


@pytest.mark.slow
def test_cli_prints_the_table_and_writes_json(hotpot_slice, tmp_path):
    questions, corpus, work = hotpot_slice
    figures = tmp_path / "figures.json"
    result = CliRunner().invoke(bench_app, ["retrieval", "--questions", str(questions), "--corpus", str(corpus),
                                            "--work", str(work), "--limit", "3", "--no-reranker", "--json", str(figures)])
    assert result.exit_code == 0, result.output
    assert "hybrid" in result.stdout and "reranker: none" in result.stdout
    assert json.loads(figures.read_text())["retrieval"]["questions"] == 3


def test_cli_refuses_a_missing_file(tmp_path):
    result = CliRunner().invoke(bench_app, ["retrieval", "--questions", str(tmp_path / "nope.json"),
                                            "--corpus", str(tmp_path / "nope.json"), "--no-reranker"])
    assert isinstance(result.exception, UserError)
    assert "does not exist" in str(result.exception) and "\n" not in str(result.exception)


# --- scaling -----------------------------------------------------------------------------------------


def test_scaling_reports_its_figures():
    seen: dict[str, tuple[int, int]] = {}
    [row] = scaling([3000], queries=5, progress=lambda stage, done, total: seen.__setitem__(stage, (done, total)))
    # a 1M-chunk build runs for an hour: each stage shows how far it is, to its end
    assert seen == {"3,000 chunks: catalog": (3000, 3000), "3,000 chunks: vectors": (3000, 3000),
                    "3,000 chunks: reader start and queries": (0, 0)}
    assert row["chunks"] == 3000 and row["queries"] == 5
    assert row["build_seconds"]["vector"] > 0 and row["build_seconds"]["keyword"] > 0
    for name in ("vector_ms", "keyword_ms", "hybrid_ms"):
        assert 0 < row[name]["median"] <= row[name]["p90"] < 5000
    assert 0 < row["start"]["seconds"] < 60 and 0 < row["start"]["cpu_seconds"] < 60
    assert row["disk_mb"]["catalog"] > 0 and row["disk_mb"]["chroma"] > 0
    assert 0 < row["commit_kb"]["first_file"] <= row["commit_kb"]["max"]


def test_only_named_questions_are_scored() -> None:
    from dspy_rag.evals.bench_retrieval import gold_questions
    from dspy_rag.trainsets.formats import Question

    questions = [Question(str(n), f"q{n}", "a", gold_passages=("p",) if n != 2 else ()) for n in range(5)]
    assert [q.id for q in gold_questions(questions, None, {"1", "2", "4"})] == ["1", "4"]
    assert [q.id for q in gold_questions(questions, 1, None)] == ["0"]


def test_held_out_only_needs_a_trained_reranker() -> None:
    from dspy_rag.errors import UserError
    from dspy_rag.evals.bench_retrieval import held_out_ids

    with pytest.raises(UserError, match="train-reranker"):
        held_out_ids(None)
