"""Shared fixtures: the real data in ../shared/data, scratch configurations and a real 10-K index."""

import os
from pathlib import Path

import pytest

from dspy_rag.config import Config, load_config
from dspy_rag.index import Index

REPO = Path(__file__).resolve().parents[1]


def shared_data() -> Path:
    """../shared/data beside the checkout (or $SHARED_DATA): real files, never copied into the repo."""
    for candidate in (os.environ.get("SHARED_DATA"), REPO.parent / "shared" / "data", "/work/shared/data"):
        if candidate and Path(candidate, "nvidia-10k-fy2023").is_dir():
            return Path(candidate)
    raise RuntimeError("../shared/data not found; set SHARED_DATA to the folder holding nvidia-10k-fy2023/")


DATA = shared_data()
TENK = DATA / "nvidia-10k-fy2023" / "nvda-20230129.htm"


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
