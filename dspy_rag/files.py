"""Atomic file writes: a reader sees the old file or the new one, never half of either."""

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from platformdirs import user_cache_dir

REPO = Path(__file__).resolve().parents[1]  # the checkout (an editable install's source tree)


def cache_root() -> Path:
    """Where derived data lives (assembled models, prompt states, snapshot indexes): $DSPY_RAG_CACHE, else the
    user's cache folder for dspy-rag (on Linux ~/.cache/dspy-rag, or under $XDG_CACHE_HOME)."""
    return Path(os.environ.get("DSPY_RAG_CACHE") or user_cache_dir("dspy-rag"))


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


def write_json_atomic(path: Path, value: Any) -> None:
    write_atomic(path, json.dumps(value, ensure_ascii=False, indent=1).encode("utf-8"))
