"""Shared fixtures: the real data in ../shared/data, scratch configurations and a real 10-K index."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from dspy_rag.config import Config, load_config
from dspy_rag.index import Index
from dspy_rag.trainsets.locations import shared_data, tenk_filing

DATA = shared_data()
TENK = tenk_filing()
CLI = str(Path(sys.executable).parent / "dspy-rag")


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900
            ) -> subprocess.CompletedProcess[str]:
    """The installed `dspy-rag` as a user runs it, without the developer's DSPY_RAG_* or provider keys."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("DSPY_RAG_", "OPENAI_")) or k == "DSPY_RAG_CACHE"}
    return subprocess.run([CLI, *args], cwd=cwd, env={**clean, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test reads the developer's dspy-rag.yaml or DSPY_RAG_* variables."""
    for name in list(os.environ):
        if name.startswith("DSPY_RAG_") and name != "DSPY_RAG_CACHE":
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def free_port() -> int:
    """A port nothing listens on (so a URL to it fails, or a server can take it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def running_server(command: list[str], ready_url: str, timeout: float = 60.0) -> Iterator[None]:
    """A real server process for the duration of a block, once `ready_url` answers."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(ready_url, timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail(f"{command[0]} did not start")
                time.sleep(0.25)
        yield
    finally:
        process.terminate()
        process.wait(timeout=30)


def scratch_config(root: Path, **overrides: object) -> Config:
    return load_config(overrides={"index.path": root / "index", **overrides}, environ={})


@pytest.fixture(scope="session")
def tenk_index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    """The real 10-K ingested once per session into real Chroma with real embeddings."""
    index = Index(scratch_config(tmp_path_factory.mktemp("tenk")))
    index.ingest([str(TENK)])
    return index


FACTS = ("NVIDIA's Data Center revenue for fiscal year 2023 was $15.01 billion, up 41% from a year ago.\n\n"
         "Gaming revenue for fiscal year 2023 was $9.07 billion, down 27% from a year ago.\n")
# A scripted LM's replies for the deep program, chosen by the output fields each prompt asks for: every run
# plans one step and answers "$15.01 billion".
REPLIES: dict[str, dict[str, Any]] = {
    "`steps`": {"steps": [{"sub_question": "Data Center revenue in fiscal 2023?", "tool": "search_docs",
                           "keywords": ["Data Center"], "section": None, "justification": "one fact"}]},
    "`query`": {"query": "Data Center revenue fiscal 2023"},
    "`strategy`": {"strategy": "hybrid", "reason": "figures"},
    "`context`": {"context": "Data Center revenue was $15.01 billion [1].", "used_passages": [1]},
    "`finding`": {"finding": "Data Center revenue was $15.01 billion."},
    "`decision`": {"decision": "FINISH", "reason": "answered"},
    "`short_answer`": {"answer": "Data Center revenue for fiscal year 2023 was $15.01 billion [1].",
                       "short_answer": "$15.01 billion"},
}


def _question(n: int, answer: str, split: str) -> dict[str, Any]:
    return {"id": f"q{n}", "question": f"Question {n}: what was the revenue?", "answer": answer, "split": split}


@pytest.fixture()
def trainset(tmp_path: Path) -> Path:
    """A tiny trainset over two facts: the scripted answer is right for q1, q3 (train) and q5 (dev), wrong for
    q2, q4 (train) and q6 (dev)."""
    (tmp_path / "facts.md").write_text(FACTS)
    rows = [_question(1, "$15.01 billion", "train"), _question(2, "Jensen Huang", "train"),
            _question(3, "15.01 billion", "train"), _question(4, "41%", "train"),
            _question(5, "$15.01 billion", "dev"), _question(6, "Jensen Huang", "dev")]
    (tmp_path / "qs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "tiny.yaml").write_text("name: tiny\ndescription: two facts\nquestions: qs.jsonl\n"
                                        "documents: [facts.md]\nsplit: {field: split}\n")
    return tmp_path / "tiny.yaml"
