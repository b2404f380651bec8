"""The run store: every program run that eval, compile's dev scoring and distill-policy's tracing make, kept once
in the user's cache and reused by any command that asks for the same run.

A run is keyed by everything that determines it (decoding is greedy, so the same inputs make the same run): the
program's state (instructions and demos of every predictor, a learned policy), its class and stopping policy, the
settings that steer it (model and LM settings, retrieval, reranker, budgets, guards, roles, tiers, web), the
corpus, the question and the code version. A change to any of them is another key, so a stale run is never
reused. The store is one SQLite file: each run is written in a transaction of its own, so a command killed
mid-run loses only the run in flight; past `runs.max_mb` the least recently used runs are dropped. Runs are
carried to another machine's store as a file of JSON lines (`export`, `import_from`), keys and all.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import os
import re
import sqlite3
import time
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, is_dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspy_rag import paths
from dspy_rag.config import Config
from dspy_rag.errors import UserError
from dspy_rag.files import cache_root, write_atomic

if TYPE_CHECKING:
    import dspy

STORE_FILE = "runs.sqlite"
PRUNED_SHARE = 0.9  # pruning goes below the cap, so the next few runs do not each prune again
SMALL_FILE = 1 << 20  # a reranker's files up to this size are hashed whole; larger weights by size
# The code whose change can change a run: the package's own modules (less those that only show or serve runs),
# its programs and prompt signatures, and the scoring stored with each run.
CODE_PACKAGES = ("dspy_rag", "dspy_rag.pipelines", "dspy_rag.signatures")
CODE_MODULES = ("dspy_rag.evals.metrics", "dspy_rag.evals.research_metric", "dspy_rag.evals.rows",
                "dspy_rag.optimizers.policy_labels")
NOT_IN_A_RUN = frozenset({"api.py", "reporter.py", "ledger.py", "tracking.py", "run_store.py"})
SCHEMA = """CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY, kind TEXT NOT NULL, set_name TEXT NOT NULL, model TEXT NOT NULL, program TEXT NOT NULL,
    question_id TEXT NOT NULL, payload TEXT NOT NULL, bytes INTEGER NOT NULL, created REAL NOT NULL,
    used REAL NOT NULL);
CREATE INDEX IF NOT EXISTS runs_used ON runs (used);"""
# A file of runs carried to another store (`dspy-rag runs export|import`): this header line, then a run a line.
EXPORT_HEADER = {"format": "dspy-rag runs", "version": 1}
EXPORTED = ("key", "kind", "set_name", "model", "program", "question_id", "payload")
FILTERS = ("kind", "set_name", "model", "program")  # the columns an export can be limited by
GZIP_MAGIC = b"\x1f\x8b"
RUN_KEY = re.compile(r"[0-9a-f]{64}")


def code_files() -> list[Path]:
    """The sources a run depends on: editing a module, a prompt signature or a metric makes earlier runs stale."""
    files: list[Path] = []
    for package in CODE_PACKAGES:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations
        folder = Path(next(iter(spec.submodule_search_locations)))
        files += sorted(f for f in folder.glob("*.py") if f.name not in NOT_IN_A_RUN)
    return files + [Path(spec.origin) for name in CODE_MODULES
                    if (spec := importlib.util.find_spec(name)) is not None and spec.origin]


@cache
def code_version() -> str:
    """A digest of `code_files`, read once a process."""
    return hashlib.sha256(b"".join(f.name.encode() + f.read_bytes() for f in code_files())).hexdigest()[:16]


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def program_identity(program: dspy.Module) -> dict[str, Any]:
    """What of the program itself determines its runs: its class, its predictors' instructions and demos, its
    stopping policy and a learned policy's weights (not its training summary: distilled again to the same weights,
    it runs alike)."""
    state = program.dump_state()
    for predictor in state.values():
        if isinstance(predictor, dict):
            predictor.pop("lm", None)  # the LM is keyed by the settings, without its object's address or keys
    policy = getattr(program, "policy", None)
    learned = getattr(policy, "learned", None)
    return {"class": type(program).__name__, "state": digest(state), "policy": getattr(policy, "mode", None),
            "learned": digest({k: v for k, v in asdict(learned).items() if k != "summary"})
            if is_dataclass(learned) else None}


def folder_identity(folder: Path) -> str:
    """A reranker folder's content: small files whole, large weights by size (hashing them costs seconds)."""
    parts = [(f.name, f.read_bytes() if f.stat().st_size <= SMALL_FILE else f.stat().st_size)
             for f in sorted(folder.rglob("*")) if f.is_file()]
    return digest(parts)


def reranker_identity(name: str) -> str:
    """The reranker a run used, by content when it is a folder (a retrained one at the same path is another)."""
    folder = Path(name)
    return folder_identity(folder) if folder.is_dir() else name


def run_settings(config: Config) -> dict[str, Any]:
    """The settings that steer a run; not where the index or artifacts lie (the corpus and the program are keyed
    by content), not keys, timeouts, threads or caches."""
    lm = config.lm.model_dump(mode="json", include={"model", "temperature", "max_tokens", "api_base",
                                                     "context_window", "parallel_steps"})
    if planner := config.lm.separate_planner:
        lm["planner_model"] = planner
        if (base := config.lm.for_model(planner).api_base) != config.lm.api_base:  # a base held for its provider
            lm["planner_api_base"] = base
    web = config.web.model_dump(mode="json", include={"provider", "snapshot_path"})
    sections = ("embedding", "retrieval", "budgets", "guards", "roles", "tiers")
    return {"lm": lm, "web": web, **{s: getattr(config, s).model_dump(mode="json") for s in sections}}


@dataclass(frozen=True)
class RunContext:
    """What every run of one program on one corpus shares; a run's key adds its kind and question."""

    set_name: str
    model: str
    program: str  # how the program is shown in `dspy-rag runs list`: a column label, or a compile's artifact
    digest: str

    def key(self, kind: str, question: str, extra: Any = None) -> str:
        return digest([self.digest, kind, question, extra])


def run_context(program: dspy.Module, config: Config, set_name: str, corpus: str, shown_as: str,
                web: Any = None) -> RunContext:
    """The context of `program` run with `config` on a set whose corpus has content hash `corpus`; `web` is the
    set's own web search, when it has one (a snapshot is keyed by its pages)."""
    reranker = getattr(program, "reranker", None)
    parts = {"program": program_identity(program), "settings": run_settings(config), "corpus": corpus,
             "reranker": reranker_identity(reranker.name) if reranker is not None else None,
             "web": getattr(web, "fingerprint", getattr(web, "name", None)), "code": code_version()}
    return RunContext(set_name, config.lm.model, shown_as, digest(parts))


@dataclass
class Tally:
    """Runs a command made and runs it took from the store."""

    run: int = 0
    reused: int = 0

    def text(self) -> str:
        return f"{self.run} run, {self.reused} reused from the run store"


def store_path() -> Path:
    """$DSPY_RAG_RUNS, else runs.sqlite in the cache: a second checkout or a test run keeps its runs apart."""
    if named := os.environ.get("DSPY_RAG_RUNS"):
        return paths.named(Path(named), "DSPY_RAG_RUNS")
    return cache_root() / STORE_FILE


class RunStore:
    """The runs, one SQLite row each: its key, what it is (for listing) and its JSON payload."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        if path.is_dir():
            raise UserError(f"the run store {paths.shown(path)} is a folder; set DSPY_RAG_RUNS to a file in it")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.max_bytes = path, max_bytes
        try:
            # Autocommit: each statement is its own transaction, so a kill leaves every earlier run whole.
            self.db = sqlite3.connect(path, timeout=60, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.executescript(SCHEMA)
        except sqlite3.DatabaseError as error:
            raise UserError(f"the run store {paths.shown(path)} cannot be opened ({error}); if it is not a run "
                            "store, set DSPY_RAG_RUNS to another file, else move it aside and its runs are "
                            "made again as needed") from None
        self.size = self.payload_bytes()
        self.prune(max_bytes)

    @classmethod
    def of(cls, config: Config) -> RunStore:
        """The store in the user's cache, capped as the configuration says."""
        return cls(store_path(), config.runs.max_mb * 2**20)

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.db.close()

    def get(self, key: str) -> Any:
        """The payload of the run with this key, or None; a hit counts as a use, for pruning."""
        found = self.db.execute("SELECT payload FROM runs WHERE key = ?", (key,)).fetchone()
        if found is None:
            return None
        self.db.execute("UPDATE runs SET used = ? WHERE key = ?", (time.time(), key))
        return json.loads(found[0])

    def put(self, key: str, context: RunContext, kind: str, question_id: str, payload: Any) -> None:
        # Escaped, so half an emoji an LM wrote (a lone surrogate, which UTF-8 cannot hold) is kept as it was.
        text = json.dumps(payload, default=str)
        size, now = len(text.encode()), time.time()
        replaced = self.db.execute("SELECT bytes FROM runs WHERE key = ?", (key,)).fetchone()
        self.db.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (key, kind, context.set_name, context.model, context.program, question_id, text,
                         size, now, now))
        self.size += size - (replaced[0] if replaced else 0)
        if self.size > self.max_bytes:
            self.prune(self.max_bytes)

    def payload_bytes(self) -> int:
        return int(self.db.execute("SELECT COALESCE(SUM(bytes), 0) FROM runs").fetchone()[0])

    def prune(self, max_bytes: int) -> int:
        """Drop the least recently used runs until the rest fit in `max_bytes` (with room to spare); how many."""
        if self.size <= max_bytes:
            return 0
        target, dropped = int(max_bytes * PRUNED_SHARE), 0
        for key, size in self.db.execute("SELECT key, bytes FROM runs ORDER BY used").fetchall():
            if self.size <= target:
                break
            self.db.execute("DELETE FROM runs WHERE key = ?", (key,))
            self.size, dropped = self.size - size, dropped + 1
        return dropped

    def compact(self) -> None:
        """Give the space of dropped runs back to the file system."""
        self.db.execute("VACUUM")

    def summary(self) -> dict[str, Any]:
        """Counts per kind, set, model and program, and sizes: what `dspy-rag runs list` shows."""
        groups = self.db.execute(
            "SELECT kind, set_name, model, program, COUNT(*), SUM(bytes), MAX(used) FROM runs "
            "GROUP BY kind, set_name, model, program ORDER BY kind, set_name, model, program").fetchall()
        names = ("kind", "set", "model", "program", "runs", "bytes", "last_used")
        return {"path": str(self.path), "runs": sum(g[4] for g in groups), "payload_bytes": self.size,
                "file_bytes": sum(f.stat().st_size for f in self.path.parent.glob(f"{self.path.name}*")),
                "max_bytes": self.max_bytes, "groups": [dict(zip(names, g, strict=True)) for g in groups]}

    def export(self, path: Path, filters: dict[str, str]) -> int:
        """Write the runs whose columns equal `filters` (set_name, model, program, kind) to `path`, gzipped JSON
        lines under `EXPORT_HEADER`, written whole or not at all; how many."""
        assert set(filters) <= set(FILTERS), filters
        if path.resolve() in {self.path.resolve().with_name(self.path.name + end) for end in ("", "-wal", "-shm")}:
            raise UserError(f"{paths.shown(path)} is the run store itself; name another file")
        if path.exists() and not is_export(path):
            raise UserError(f"{paths.shown(path)} exists and is not an earlier export; name a new file (an "
                            "export only replaces an export)")
        where = " AND ".join(f"{column} = ?" for column in filters) or "1"
        buffer, count = io.BytesIO(), 0
        with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=6) as packed:  # compressed as it is read
            packed.write(json_line(EXPORT_HEADER))
            for run in self.db.execute(f"SELECT {', '.join(EXPORTED)} FROM runs WHERE {where} ORDER BY created",
                                       tuple(filters.values())):
                packed.write(json_line(dict(zip(EXPORTED, run, strict=True))))
                count += 1
        write_atomic(path, buffer.getvalue())
        return count

    def import_from(self, path: Path) -> tuple[int, int, int]:
        """Add the runs of an exported file, all or none: (added, already here, dropped by pruning to the cap).
        A run already here is kept as it is (the same key is the same run). A file that is not an export, or whose
        new runs would not fit in the store's cap, is refused before anything is added."""
        room = int(self.max_bytes * PRUNED_SHARE)
        added = present = added_bytes = 0
        now = time.time()
        self.db.execute("BEGIN IMMEDIATE")  # the write lock now, not midway
        try:
            for run in read_export(path, room):
                size = len(run["payload"].encode())
                inserted = self.db.execute("INSERT OR IGNORE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                           (*(run[c] for c in EXPORTED), size, now, now)).rowcount
                added, present, added_bytes = added + inserted, present + 1 - inserted, added_bytes + size * inserted
                if added_bytes > room:
                    raise UserError(f"the new runs in {paths.shown(path)} take over {room / 2**20:.1f} MB, more than "
                                    "the run store keeps; raise runs.max_mb, or export fewer (--set, --model, "
                                    "--program)")
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:  # SQLite ends it itself on some errors (a full disk)
                self.db.execute("ROLLBACK")
            raise
        self.size = self.payload_bytes()
        return added, present, self.prune(self.max_bytes)


def is_export(path: Path) -> bool:
    """Whether `path` is a file `RunStore.export` wrote: it opens with `EXPORT_HEADER`."""
    try:
        with gzip.open(path, "rb") as handle:
            return parsed(handle.readline(1024)) == EXPORT_HEADER
    except (OSError, EOFError, zlib.error):
        return False


def json_line(value: Any) -> bytes:
    return (json.dumps(value) + "\n").encode()


def read_export(path: Path, max_line: int) -> Iterator[dict[str, str]]:
    """The runs of a file `RunStore.export` wrote (gzipped or not), each checked as it is read, none longer
    than `max_line` bytes; a UserError at the first line that is not one."""
    if not path.is_file():
        raise UserError(f"{paths.shown(path)} is not a file; give a file `dspy-rag runs export` wrote")
    try:
        with path.open("rb") as raw:
            gzipped = raw.read(2) == GZIP_MAGIC
        with gzip.open(path, "rb") if gzipped else path.open("rb") as handle:
            header = parsed(handle.readline(max_line + 1))
            if not isinstance(header, dict) or header.get("format") != EXPORT_HEADER["format"]:
                raise UserError(f"{paths.shown(path)} is not a file of runs (its first line is not "
                                f"{json.dumps(EXPORT_HEADER)}); give a file `dspy-rag runs export` wrote")
            if header != EXPORT_HEADER or type(header["version"]) is not int:
                raise UserError(f"{paths.shown(path)} holds runs in format version {header.get('version')!r}, and "
                                f"this dspy-rag reads version {EXPORT_HEADER['version']}; use the dspy-rag that "
                                "exported it")
            for number, line in enumerate(iter(lambda: handle.readline(max_line + 1), b""), start=2):
                whole = len(line) <= max_line
                run = parsed(line) if whole else None
                if problem := export_problem(run) if whole else f"over {max_line} bytes, more than the store keeps":
                    raise UserError(f"{paths.shown(path)} line {number}: {problem}; nothing was imported: give the "
                                    "file as `dspy-rag runs export` wrote it")
                yield run
    except (OSError, EOFError, zlib.error) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise UserError(f"cannot read runs from {paths.shown(path)} ({type(error).__name__}: {reason}); "
                        "give a file `dspy-rag runs export` wrote") from None


def parsed(line: str | bytes) -> Any:
    """A line's JSON, or None where it is not JSON (or nests too deep to read)."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def export_problem(run: Any) -> str | None:
    """Why one exported line is not a run the store can hold, or None."""
    if not isinstance(run, dict) or set(run) != set(EXPORTED):
        return f"a run is a JSON object with exactly the fields {', '.join(EXPORTED)}"
    if not all(isinstance(run[column], str) and utf8(run[column]) for column in EXPORTED):
        return "every field of a run is UTF-8 text"
    if not RUN_KEY.fullmatch(run["key"]):
        return "a run's key is 64 hex digits"
    return None if isinstance(parsed(run["payload"]), dict) else "a run's payload is a JSON object"


def utf8(text: str) -> bool:
    """Whether `text` can be stored: JSON may escape half a surrogate pair, which UTF-8 cannot hold."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
