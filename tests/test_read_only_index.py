"""A reader never writes the index: every file below an index folder, its name and its bytes, is the same after
`ask` (answered, failed at the LM, interrupted), `eval` and `bench retrieval` as before. Chroma itself writes when
it opens a store (a row in its SQLite database, the HNSW files of a small segment), so each command here opens the
store from disk, as a new process does."""

import json
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_reliability import reopened, stopped, wait_for

from conftest import FACTS, FakeLM, assert_one_line_error, free_port, ingested, invoke, scratch_config, start_cli, tree
from dspy_rag.index import Index
from dspy_rag.retrieval import Retriever
from dspy_rag.trainsets.registry import load_trainset

QUESTION = "What was NVIDIA's Data Center revenue in fiscal 2023?"


def unchanged_by(folder: Path, command: tuple[str, ...], code: int = 0) -> subprocess.CompletedProcess[str]:
    """Run `dspy-rag COMMAND` in this process on a store opened afresh; the files below `folder` must not change."""
    before = tree(folder)
    reopened()
    result = invoke(*command)
    assert result.returncode == code, result.stderr
    assert tree(folder) == before
    return result


@pytest.fixture(scope="module")
def index_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small real index (real Chroma, real embeddings), shared by the commands that only read it."""
    return ingested(tmp_path_factory.mktemp("read-only"), "facts.md", FACTS)


@pytest.fixture()
def lm_env(fake_lm: FakeLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The scripted LM configured, no reranker to load; the settings also for a command run as a process."""
    env = {**fake_lm.env, "DSPY_RAG_RETRIEVAL_RERANKER": "none", "DSPY_RAG_CACHE": str(tmp_path / "cache")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def test_an_answered_ask_writes_nothing(index_folder: Path, lm_env: dict[str, str]) -> None:
    result = unchanged_by(index_folder, ("ask", "--json", "--index", str(index_folder), QUESTION))
    assert json.loads(result.stdout)["short_answer"] == "$15.01 billion"


@pytest.mark.parametrize("fault", ["refusing the key", "nothing listening"])
def test_an_ask_failing_at_the_lm_writes_nothing(index_folder: Path, fake_lm: FakeLM, lm_env: dict[str, str],
                                                 monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    if fault == "refusing the key":
        fake_lm.status, fake_lm.error = 401, "Incorrect API key provided"
    else:
        monkeypatch.setenv("DSPY_RAG_LM_API_BASE", f"http://127.0.0.1:{free_port()}/v1")
    result = unchanged_by(index_folder, ("ask", "--index", str(index_folder), QUESTION), code=2)
    assert_one_line_error(result)


@pytest.mark.slow
def test_an_interrupted_ask_writes_nothing(index_folder: Path, fake_lm: FakeLM, lm_env: dict[str, str],
                                           tmp_path: Path) -> None:
    """Ctrl-C while the ask waits for the LM, the store opened: nothing changed, and its copy of the store gone."""
    before = tree(index_folder)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    fake_lm.hold_after = 0
    ask = start_cli("ask", "--index", str(index_folder), QUESTION, cwd=tmp_path,
                    env={**lm_env, "TMPDIR": str(temporary)})
    wait_for(lambda: bool(fake_lm.requests), "the ask waits for the LM", ask)
    stopped(ask, signal.SIGINT)
    assert tree(index_folder) == before
    assert not list(temporary.iterdir())


def test_a_store_left_mid_commit_is_read_as_last_committed_and_left_to_the_writer(index_folder: Path,
                                                                                    tmp_path: Path) -> None:
    """A writer killed inside a SQLite commit leaves a hot journal: a reader reads the last commit from its copy,
    and the rollback stays the next writer's."""
    shutil.copytree(index_folder, tmp_path / "index")
    database = tmp_path / "index" / "chroma" / "chroma.sqlite3"
    killed_mid_commit = ("import os, sqlite3, sys\n"
                         "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
                         "db.execute('PRAGMA cache_size = 1'); db.execute('BEGIN')\n"
                         "db.execute(\"UPDATE embedding_metadata SET string_value = hex(randomblob(50000))\")\n"
                         "os._exit(0)\n")  # more changed pages than the cache holds: they spilled into the file
    subprocess.run([sys.executable, "-c", killed_mid_commit, str(database)], check=True)
    assert database.with_name(database.name + "-journal").exists()
    files = tree(tmp_path / "index")
    reopened()
    index = Index(scratch_config(tmp_path)).require()
    stored = index.collection.get(include=["documents"])
    committed = index.catalog.chunks(stored["ids"])
    assert stored["documents"] == [committed[i].text for i in stored["ids"]]  # the changes rolled back
    assert Retriever(index).search("Data Center revenue", "vector")
    assert tree(tmp_path / "index") == files
    with sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True) as reader, pytest.raises(sqlite3.Error):
        reader.execute("SELECT count(*) FROM embedding_metadata").fetchall()  # still mid-commit on disk


# --- eval and bench: the indexes dspy-rag keeps for a trainset's corpus ------------------------------------------


@pytest.fixture(scope="module")
def trainset(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A tiny trainset over its own document (its scratch index, keyed by the document's bytes, is this module's)."""
    folder = tmp_path_factory.mktemp("trainset")
    (folder / "facts.md").write_text(f"{FACTS}\nThis copy is number {secrets.token_hex(8)}.\n")
    rows = [{"id": "q1", "question": "What was the Data Center revenue?", "answer": "$15.01 billion", "split": "dev"}]
    (folder / "qs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    definition = folder / "tiny.yaml"
    definition.write_text("name: tiny\ndescription: one fact\nquestions: qs.jsonl\ndocuments: [facts.md]\n"
                          "split: {field: split}\n")
    yield definition
    shutil.rmtree(load_trainset(str(definition)).index_folder, ignore_errors=True)


def test_an_eval_over_an_index_built_before_writes_nothing(trainset: Path, lm_env: dict[str, str],
                                                           tmp_path: Path) -> None:
    evaluating = ("eval", "--questions", str(trainset), "--pipeline", "baseline")
    assert invoke(*evaluating, "--out", str(tmp_path / "first")).returncode == 0  # builds the corpus index
    unchanged_by(load_trainset(str(trainset)).index_folder, (*evaluating, "--out", str(tmp_path / "again")))
    assert json.loads((tmp_path / "again" / "results.json").read_text())["rows"]  # it did answer again


def test_a_bench_over_an_index_built_before_writes_nothing(tmp_path: Path) -> None:
    texts = {"p1": "Data Center revenue for fiscal 2023 was $15.01 billion.", "p2": "Gaming revenue fell 27%.",
             "p3": "The crate left the Oslo depot on Monday."}
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"id": i, "title": i, "text": t}) + "\n"
                                                   for i, t in texts.items()))
    (tmp_path / "qs.jsonl").write_text(json.dumps({"id": "q1", "question": "Data Center revenue in fiscal 2023?",
                                                   "answer": "$15.01 billion", "gold_passages": ["p1"]}) + "\n")
    benching = ("bench", "retrieval", "--questions", str(tmp_path / "qs.jsonl"), "--corpus",
                str(tmp_path / "corpus.jsonl"), "--work", str(tmp_path / "work"), "--no-reranker")
    assert invoke(*benching).returncode == 0  # builds the corpus index
    assert "hybrid" in unchanged_by(tmp_path / "work", benching).stdout


def test_an_index_missing_its_vectors_is_still_mended_by_the_next_eval(trainset: Path, lm_env: dict[str, str],
                                                                         tmp_path: Path) -> None:
    """A corpus index is only read when it is whole: one whose vector store was lost is embedded again."""
    evaluating = ("eval", "--questions", str(trainset), "--pipeline", "baseline")
    assert invoke(*evaluating, "--out", str(tmp_path / "first")).returncode == 0
    folder = load_trainset(str(trainset)).index_folder
    shutil.rmtree(folder / "chroma")
    reopened()
    assert invoke(*evaluating, "--out", str(tmp_path / "again")).returncode == 0
    reopened()
    index = Index(scratch_config(tmp_path, **{"index.path": folder}))
    assert index.collection.count() == index.chunk_count > 0
