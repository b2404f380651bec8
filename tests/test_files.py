"""Atomic writes: a failed write leaves the old file and no temporary file behind; where the cache lives."""

import json
import os
import sys
from pathlib import Path

import pytest

from dspy_rag.files import cache_root, write_atomic, write_json_atomic


def test_write_atomic_creates_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "state.bin"
    write_atomic(path, b"first version")
    write_atomic(path, b"second")
    assert path.read_bytes() == b"second"
    assert os.listdir(path.parent) == ["state.bin"]


def test_write_json_atomic_round_trips(tmp_path: Path) -> None:
    path, value = tmp_path / "data.json", {"name": "Données", "n": [1, 2]}
    write_json_atomic(path, value)
    assert json.loads(path.read_text(encoding="utf-8")) == value
    assert "Données" in path.read_text(encoding="utf-8"), "written as UTF-8, not \\u escapes"


def test_half_an_emoji_is_written_as_its_escape_and_reads_back_as_it_was(tmp_path: Path) -> None:
    from dspy_rag.ledger import LedgerEntry, append, read

    torn = "caf\u00e9 \ud83d"  # an LM's reply cut in the middle of an emoji: a lone surrogate
    write_json_atomic(tmp_path / "out.json", {"answer": torn})
    assert json.loads((tmp_path / "out.json").read_text(encoding="utf-8")) == {"answer": torn}
    assert "café" in (tmp_path / "out.json").read_text(encoding="utf-8")  # readable text stays unescaped
    append(tmp_path / "ledger.jsonl", LedgerEntry("eval", torn, None, "m", "t", "h", "dev", "f1", 0.5, None, 2))
    assert [e.artifact for e in read(tmp_path / "ledger.jsonl")] == [torn]


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()], ids=["oserror", "interrupt"])
def test_failed_write_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"old content")

    def fail(src: str, dst: str) -> None:
        assert Path(src).read_bytes() == b"new content", "the temp file is complete before the swap"
        raise error

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(type(error)):
        write_atomic(path, b"new content")
    assert path.read_bytes() == b"old content"
    assert os.listdir(tmp_path) == ["state.json"]


def test_dspy_rag_cache_names_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSPY_RAG_CACHE", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the XDG folders are Linux's")
def test_otherwise_the_cache_is_the_users_cache_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for unset in ("DSPY_RAG_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(unset, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "dspy-rag"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "dspy-rag"
