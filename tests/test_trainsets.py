"""Trainset definitions against the real data in ../shared/data, custom definitions, errors and `dspy-rag trainsets`."""

import inspect
import json
import tempfile
from pathlib import Path

import huggingface_hub
import pytest
from typer.testing import CliRunner

from dspy_rag.cli import app
from dspy_rag.config import load_config
from dspy_rag.errors import UserError
from dspy_rag.evals.rows import load_set
from dspy_rag.optimizers.train_reranker import train_reranker
from dspy_rag.trainsets import registry
from dspy_rag.trainsets.corpus_index import default_work_dir, is_held_out
from dspy_rag.trainsets.formats import load_corpus, load_questions
from dspy_rag.trainsets.registry import Trainset, available, load_trainset

# name: (train, dev, all, corpus passages, documents, web snapshot)
SIZES = {
    "hotpotqa": (47, 23, 70, 994, None, None),
    "multihop-rag": (257, 143, 400, 326, None, None),
    "musique": (48, 22, 70, 1890, None, None),
    "nvidia-10k": (32, 14, 46, None, 1, "web-snapshot"),
    "reference": (0, 1, 1, None, 1, "web-snapshot"),
    "injection": (0, 22, 22, None, 22, None),
}
HELD_OUT_SETS = ["hotpotqa", "multihop-rag", "musique"]


def ids(questions: list) -> list[str]:
    return [q.id for q in questions]


def write_set(folder: Path, split: str = "{field: split}", **extra: str) -> Path:
    """A small generic JSONL set with its corpus and YAML definition in `folder`; returns the definition."""
    rows = [{"id": f"q{n}", "question": f"What is {n}?", "answer": str(n), "gold_passages": [f"p{n}"],
             "split": "dev" if n % 3 == 0 else "train"} for n in range(6)]
    (folder / "questions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"id": f"p{n}", "title": f"T{n}", "text": f"{n} is {n}."})
                                                 + "\n" for n in range(6)))
    fields = {"name": "tiny", "description": "six questions", "questions": "questions.jsonl",
              "corpus": "corpus.jsonl", "split": split, **extra}
    definition = folder / "tiny.yaml"
    definition.write_text("".join(f"{key}: {value}\n" for key, value in fields.items()))
    return definition


def test_the_shipped_sets_are_listed() -> None:
    assert available() == sorted(SIZES)


@pytest.mark.usefixtures("shared_data")
@pytest.mark.parametrize("name", sorted(SIZES))
def test_every_shipped_set_loads_with_disjoint_train_and_dev_that_make_all(name: str) -> None:
    trainset = load_trainset(name)
    train, dev, everything = (ids(trainset.questions(split)) for split in ("train", "dev", "all"))
    assert trainset.name == name == trainset.definition_path.stem
    assert (train or name in {"reference", "injection"}) and dev and not set(train) & set(dev)  # dev-only sets
    assert sorted(train + dev) == sorted(everything)
    assert len(trainset.content_hash) == 16 and int(trainset.content_hash, 16) >= 0


@pytest.mark.usefixtures("shared_data")
@pytest.mark.parametrize("name", HELD_OUT_SETS)
def test_held_out_sets_hold_out_what_the_reranker_holds_out(name: str) -> None:
    trainset = load_trainset(name)
    share = trainset.definition.split.held_out_share  # type: ignore[union-attr]
    assert share == inspect.signature(train_reranker).parameters["held_out_share"].default
    everything = trainset.questions("all")
    assert ids(trainset.questions("dev")) == [q.id for q in everything if is_held_out(q, share)]
    assert ids(trainset.questions("train")) == [q.id for q in everything if not is_held_out(q, share)]


def test_the_10k_set_splits_by_its_split_field_and_names_the_filing_and_the_snapshot(tenk_filing: Path) -> None:
    trainset = load_trainset("nvidia-10k")
    everything = trainset.questions("all")
    assert ids(trainset.questions("dev")) == [q.id for q in everything if q.split == "dev"]
    assert (len(trainset.questions("train")), len(trainset.questions("dev"))) == (32, 14)
    assert trainset.index_folder == default_work_dir(tenk_filing)
    assert trainset.passages == []


def test_a_corpus_index_lives_where_bench_retrieval_keeps_it(shared_data: Path) -> None:
    assert load_trainset("musique").index_folder == default_work_dir(shared_data / "musique" / "corpus.json")


def test_eval_asks_the_same_dev_questions_as_before(monkeypatch: pytest.MonkeyPatch, shared_data: Path) -> None:
    monkeypatch.setattr(Trainset, "index", lambda self, config: f"index of {self.name}")
    monkeypatch.setattr(Trainset, "web", lambda self, config: self.definition.web)
    config = load_config(environ={})
    _, musique = load_questions(shared_data / "musique" / "questions.json")
    loaded = load_set(load_trainset("musique"), config)
    assert ids(loaded.questions) == [q.id for q in musique if is_held_out(q, 0.3)]
    assert (loaded.index, loaded.web) == ("index of musique", None)
    tenk = load_set(load_trainset("nvidia-10k"), config)
    assert [q.split for q in tenk.questions] == ["dev"] * 14 and tenk.web == "web-snapshot"


def test_a_custom_definition_by_path_reads_its_files_beside_it(tmp_path: Path) -> None:
    trainset = load_trainset(str(write_set(tmp_path)))
    assert (trainset.name, trainset.format, trainset.definition_path) == ("tiny", "jsonl", tmp_path / "tiny.yaml")
    assert ids(trainset.questions("dev")) == ["q0", "q3"]
    assert ids(trainset.questions("train")) == ["q1", "q2", "q4", "q5"]
    assert [p.id for p in trainset.passages] == [f"p{n}" for n in range(6)]
    assert trainset.web(load_config(environ={})) is None


def test_a_custom_held_out_split_follows_the_rerankers_rule(tmp_path: Path) -> None:
    trainset = load_trainset(str(write_set(tmp_path, split="{held_out_share: 0.5}")))
    everything = trainset.questions("all")
    assert ids(trainset.questions("dev")) == [q.id for q in everything if is_held_out(q, 0.5)]


def test_the_content_hash_is_stable_and_follows_the_question_file(tmp_path: Path) -> None:
    definition = write_set(tmp_path)
    first = load_trainset(str(definition)).content_hash
    assert load_trainset(str(definition)).content_hash == first
    questions = tmp_path / "questions.jsonl"
    questions.write_text(questions.read_text().replace("What is 5?", "What is five?"))
    assert load_trainset(str(definition)).content_hash != first


def test_a_document_set_moved_elsewhere_is_indexed_once_not_twice(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Same bytes at a new path share the scratch index; the old path's copy must go, or every hit comes twice."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    config = load_config(environ={})
    sources = []
    for folder in ("first", "second"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "facts.md").write_text("# Revenue\n\nRevenue was $15 billion.\n")
        question = {"id": "q", "question": "?", "answer": "x", "split": "dev"}
        (tmp_path / folder / "qs.jsonl").write_text(json.dumps(question) + "\n")
        (tmp_path / folder / "t.yaml").write_text("name: t\ndescription: d\nquestions: qs.jsonl\n"
                                                  "documents: [facts.md]\nsplit: {field: split}\n")
        index = load_trainset(str(tmp_path / folder / "t.yaml")).index(config)
        sources.append(list(index.sources))
        assert index.collection.count() == 1
    assert sources == [[str(tmp_path / "first" / "facts.md")], [str(tmp_path / "second" / "facts.md")]]


def test_an_unknown_name_lists_the_sets() -> None:
    with pytest.raises(UserError, match="unknown trainset 'squad'") as raised:
        load_trainset("squad")
    assert all(name in str(raised.value) for name in SIZES)


def test_a_missing_definition_or_data_file_says_where_it_looked_and_what_to_do(tmp_path: Path,
                                                                              shared_data: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_trainset(str(tmp_path / "absent.yaml"))
    definition = write_set(tmp_path, questions="gone.jsonl")
    with pytest.raises(UserError) as raised:
        load_trainset(str(definition)).questions()
    message = str(raised.value)
    assert str(tmp_path / "gone.jsonl") in message and str(shared_data / "gone.jsonl") in message
    assert "SHARED_DATA" in message


def test_without_a_shared_data_folder_the_shipped_sets_say_how_to_point_at_one(monkeypatch: pytest.MonkeyPatch) -> None:
    def nowhere() -> Path:
        raise FileNotFoundError("no shared data")

    monkeypatch.setattr(registry, "shared_data", nowhere)
    with pytest.raises(UserError, match=r"nvidia-10k-fy2023/nvda-20230129.htm not found .*SHARED_DATA"):
        load_trainset("nvidia-10k").index(load_config(environ={}))


def test_offline_a_missing_file_named_on_the_hub_gives_one_clear_error(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    definition = write_set(tmp_path, questions="gone.jsonl",
                           hub="{questions: hf://datasets/yixuantt/MultiHopRAG/MultiHopRAG.json}")
    with pytest.raises(UserError) as raised:
        load_trainset(str(definition)).questions()
    message = str(raised.value)
    assert "hf://datasets/yixuantt/MultiHopRAG/MultiHopRAG.json could not be fetched" in message
    assert "go online" in message and "\n" not in message


@pytest.mark.parametrize("extra, where", [
    ({"documents": "[a.htm]"}, "either corpus"),
    ({"split": "{held_out_share: 1.5}"}, "split"),
    ({"hub": "{questions: https://example.com/q.json}"}, "hub.questions"),
    ({"colour": "blue"}, "colour"),
])
def test_an_invalid_definition_names_the_field(tmp_path: Path, extra: dict[str, str], where: str) -> None:
    with pytest.raises(UserError, match="invalid trainset definition") as raised:
        load_trainset(str(write_set(tmp_path, **extra)))
    assert where in str(raised.value)


def test_the_hubs_multihop_rag_files_read_like_the_local_ones(tmp_path: Path) -> None:
    evidence = [{"url": "https://news.example/a", "title": "A", "fact": "A happened."}]
    (tmp_path / "MultiHopRAG.json").write_text(json.dumps([
        {"query": "Did A happen?", "answer": "yes", "question_type": "inference_query", "evidence_list": evidence}]))
    (tmp_path / "corpus.json").write_text(json.dumps([
        {"url": "https://news.example/a", "title": "A", "body": "A happened.", "source": "News"}]))
    kind, questions = load_questions(tmp_path / "MultiHopRAG.json")
    assert kind == "multihop-rag" and questions[0].question == "Did A happen?" and len(questions[0].id) == 16
    assert questions[0].gold_passages == ("https://news.example/a",)
    assert [(p.id, p.text) for p in load_corpus(tmp_path / "corpus.json")] == [("https://news.example/a", "A happened.")]


@pytest.mark.usefixtures("shared_data")
def test_the_command_lists_the_five_sets_with_their_sizes() -> None:
    result = CliRunner().invoke(app, ["trainsets", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {r["name"]: (r["train"], r["dev"], r["all"], r["passages"], r["documents"], r["web"]) for r in rows} == SIZES
    assert {r["format"] for r in rows} == {"hotpotqa", "multihop-rag", "musique", "jsonl"}
    table = CliRunner().invoke(app, ["trainsets"])
    assert table.exit_code == 0 and "1,890 passages" in table.stdout and "web-snapshot" in table.stdout
