"""The ledger: one JSON line per compile and per evaluation, appended and never rewritten.

Writers hold an exclusive lock (a lock file beside the ledger) and add each line with one write to an
append-only descriptor, so concurrent compiles never interleave. A writer that crashed mid-line leaves a torn
line; the next writer starts on a fresh line and readers skip it, so no good entry is ever lost or glued to it.
"""

import json
import os
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from filelock import FileLock

from dspy_rag.config import Config
from dspy_rag.errors import UserError
from dspy_rag.files import json_bytes

LEDGER_VERSION = 1
LEDGER_FILE = "ledger.jsonl"


@dataclass
class LedgerEntry:
    kind: Literal["compile", "eval"]
    artifact: str | None  # None: the uncompiled program
    parent: str | None  # compile only: the artifact it was recompiled from
    model: str  # the LM the score was measured on
    trainset: str
    trainset_hash: str
    split: str
    metric: str
    score: float  # compile: the dev score after; eval: the score
    # compile: the dev score of the program it started from; eval: the uncompiled program's in the same eval, if run
    score_before: float | None
    questions: int
    optimizer: str | None = None
    lm_calls: int = 0
    tokens: int = 0
    seconds: float = 0.0
    reused: int = 0  # of the questions, those whose runs came from the run store, not run for this measurement
    gain_ci: list[float] | None = None  # 95% paired bootstrap interval of score - score_before, same questions
    time: str = ""  # ISO-8601 UTC, filled in by append when empty
    # the run store's code version of the runs scored: scores of other code are not compared, gains only where
    # marked so ("" before it was kept)
    code_version: str = ""
    version: int = LEDGER_VERSION


def ledger_path(config: Config) -> Path:
    return config.artifacts.path / LEDGER_FILE


def append(path: Path, entry: LedgerEntry) -> None:
    """Add one entry as one line, safely beside other writers and after a writer that crashed mid-line."""
    stamped = replace(entry, time=entry.time or datetime.now(UTC).isoformat(timespec="seconds"))
    append_line(path, asdict(stamped))


def append_line(path: Path, value: Any) -> None:
    """Add `value` as one JSON line of `path`, under a lock beside other writers, after a torn last line."""
    line = json_bytes(value) + b"\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path.with_name(f".{path.name}.lock")):
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)


def read(path: Path) -> list[LedgerEntry]:
    """The entries this version understands, oldest first; torn lines and newer versions are skipped."""
    return [entry for entry in read_lines(path) if entry is not None]


def read_lines(path: Path) -> list[LedgerEntry | None]:
    """Each line of the ledger as an entry, or None where it is not one this version reads (torn, edited by hand
    or newer); none for a ledger not written yet."""
    # No lock: a writer only appends, so a read sees whole lines and at most the start of one still being written,
    # which parses as torn and is skipped, as if read a moment earlier.
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    except IsADirectoryError:
        raise UserError(f"the ledger {path} is a folder; set artifacts.path to a folder whose ledger.jsonl is a "
                        "file") from None
    return [parse(line) for line in lines if line.strip()]


def parse(line: bytes) -> LedgerEntry | None:
    try:
        record = json.loads(line)
        if record["version"] > LEDGER_VERSION:
            return None
        known = {f.name for f in fields(LedgerEntry)}  # a later field this version does not know is left out
        entry = LedgerEntry(**{key: value for key, value in record.items() if key in known})
    except (ValueError, TypeError, KeyError, RecursionError):
        return None
    return entry if well_formed(entry) else None


def well_formed(entry: LedgerEntry) -> bool:
    """Whether every field holds what it is declared to: a line edited by hand may not, and `history` computes
    with them."""
    texts = (entry.model, entry.trainset, entry.trainset_hash, entry.split, entry.metric, entry.time,
             entry.code_version)
    counts = (entry.questions, entry.lm_calls, entry.tokens, entry.reused, entry.version)
    return (entry.kind in ("compile", "eval") and all(isinstance(text, str) for text in texts)
            and all(name is None or isinstance(name, str) for name in (entry.artifact, entry.parent, entry.optimizer))
            and all(isinstance(count, int) and not isinstance(count, bool) for count in counts)
            and is_number(entry.score) and is_number(entry.seconds)
            and (entry.score_before is None or is_number(entry.score_before))
            and (entry.gain_ci is None or isinstance(entry.gain_ci, list) and len(entry.gain_ci) == 2
                 and all(is_number(bound) for bound in entry.gain_ci)))


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
