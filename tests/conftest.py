"""Shared fixtures: the real data in ../shared/data, scratch configurations and a real 10-K index."""

import os
import subprocess
import sys
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


def scratch_config(root: Path, **overrides: object) -> Config:
    return load_config(overrides={"index.path": root / "index", **overrides}, environ={})


@pytest.fixture(scope="session")
def tenk_index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    """The real 10-K ingested once per session into real Chroma with real embeddings."""
    index = Index(scratch_config(tmp_path_factory.mktemp("tenk")))
    index.ingest([str(TENK)])
    return index
