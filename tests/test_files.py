"""Atomic writes: a failed write leaves the old file and no temporary file behind."""

import json
import os
from pathlib import Path

import pytest

from dspy_rag.files import write_atomic, write_json_atomic


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
