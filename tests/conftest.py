"""Shared fixtures: the real data in ../shared/data, scratch configurations and a real 10-K index."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
