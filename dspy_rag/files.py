"""Where the tool's files are (the shipped artifacts, the checkout, the cache) and atomic file writes: a reader
sees the old file or the new one, never half of either."""

import json
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from platformdirs import user_cache_dir

from dspy_rag import paths

# The source tree in an editable install or on PYTHONPATH; site-packages when installed from a wheel.
REPO = Path(__file__).resolve().parents[1]
SHIPPED_PACKAGE = "dspy_rag.shipped"  # pyproject.toml maps it onto the checkout's artifacts/ folder


def shipped_artifacts() -> Path:
    """The folder of the artifacts that come with the tool (the default compiled program, the trained reranker):
    the package data of `dspy_rag.shipped`, which is the checkout's artifacts/ folder in an editable install."""
    try:
        # A wheel installs unzipped, so the package's resources are plain files on disk.
        return Path(str(resources.files(SHIPPED_PACKAGE)))
    except ModuleNotFoundError:  # a source tree on PYTHONPATH, or an editable install older than the package
        return REPO / "artifacts"


def checkout() -> Path | None:
    """The source tree the code runs from, or None when it runs from a wheel installed into site-packages."""
    return REPO if (REPO / "pyproject.toml").is_file() else None


def cache_root() -> Path:
    """Where derived data lives (assembled models, prompt states, snapshot indexes): $DSPY_RAG_CACHE, else the
    user's cache folder for dspy-rag (on Linux ~/.cache/dspy-rag, or under $XDG_CACHE_HOME)."""
    if not (named := os.environ.get("DSPY_RAG_CACHE")):
        return Path(user_cache_dir("dspy-rag"))
    return paths.folder(Path(named), "DSPY_RAG_CACHE", "the cache")


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def json_bytes(value: Any, indent: int | None = None) -> bytes:
    """JSON as UTF-8, readable text kept as is; half an emoji an LM wrote (a lone surrogate, which UTF-8 cannot
    hold) is written as its JSON escape and so reads back as it was."""
    return json.dumps(value, ensure_ascii=False, indent=indent).encode("utf-8", "backslashreplace")


def write_json_atomic(path: Path, value: Any) -> None:
    write_atomic(path, json_bytes(value, indent=1))
