"""A fuzzing campaign over every command's options, the configuration file and the DSPY_RAG_* environment
(issue 17). Hypothesis draws the cases (fuzz_cases.py); each runs in this process through `main()`, as
`dspy-rag` runs, in a scratch working folder and cache of its own, and its outcome is sorted into a kind:

    ok               exit 0
    reached work     passed every check and was stopped by the fence where real work would start
    user error       exit 2 with one `error:` line, last on stderr, that says what to do (`says_what_to_do`)
    usage error      exit 2 from the command-line parser (typer/click)
    partial failure  exit 1 from an ingest that reported the files it could not read
    unhelpful error  an error line that does not say what to do, holds control characters, or is not alone
    unexpected       the last-net handler of `main()` fired
    traceback        an exception escaped `main()`, or a traceback was printed
    hang             the case outlived CASE_SECONDS
    other            any other exit

No case reaches a language model, loads a model, reads a dataset or talks to the network: the fence
(fuzz_fence.py) stops it there, and it counts as "reached work".

    scripts/fuzz-cli --cases 2000 --out evals/results/fuzz-cli.json    # a nightly-style run
"""

import argparse
import io
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest.mock import patch

import typer.main
from fuzz_cases import FIXTURES, ODDITIES, Case, Values, cases, commands, lay_out
from fuzz_fence import Hang, ReachedWork, ZeroEncoder, fenced, time_limit
from hypothesis import HealthCheck, Verbosity, given, seed, settings

from dspy_rag.cli import app

REPORT = Path(__file__).resolve().parents[1] / "evals" / "results" / "fuzz-cli.json"
CASE_SECONDS = 30  # a loaded 2-core machine stretches a first import; a case that blocks takes this long
ACCEPTED = ("ok", "reached work", "user error", "usage error", "partial failure")
FAILED = ("unhelpful error", "unexpected", "traceback", "hang", "other")
# An error line says what to do when one of its clauses starts with an instruction (or gives an example).
HINTS = ("add", "ask", "check", "choose", "compile", "convert", "create", "delete", "distill", "download", "drop",
         "fix", "give", "go", "ingest", "install", "keep", "list", "lower", "make", "name", "pass", "pick", "point",
         "raise", "re-ingest", "recompile", "reinstall", "remove", "rename", "restore", "retrain", "retry", "run",
         "save", "see", "set", "split", "start", "train", "try", "unset", "upgrade", "use", "wait", "write")
HINT = re.compile(r"(?:^|[;(,:]\s*|\b(?:or|then|and)\s+)(?:e\.g\.|(?:" + "|".join(HINTS) + r")\b)", re.IGNORECASE)
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def says_what_to_do(message: str) -> bool:
    return HINT.search(message) is not None


@dataclass(frozen=True)
class Outcome:
    kind: str
    detail: str  # the error line, the place the fence stopped, or the escaped exception


def _reports_failures(stdout: str) -> bool:
    """`ingest --json` lists the files it could not read in its summary rather than on stderr."""
    try:
        return bool(json.loads(stdout).get("failed"))
    except (ValueError, AttributeError):
        return False


def classify(code: int | None, stdout: str, stderr: str) -> Outcome:
    """The kind of a run that ended with `code` and printed `stdout` and `stderr`."""
    lines = stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    if "Traceback (most recent call last)" in stderr:
        return Outcome("traceback", stderr[-2000:])
    if any(line.startswith("error: unexpected ") for line in errors):
        return Outcome("unexpected", errors[-1])
    if code == 0:
        return Outcome("ok", "")
    if code == 2 and not errors and ("Usage:" in stdout + stderr or "─ Error ─" in stderr):
        # The parser's own message, in its box; no arguments at all print the help on stdout.
        return Outcome("usage error", next((line.strip("│ ") for line in lines if "│" in line), "help"))
    if code == 2 and errors:
        message = errors[-1].removeprefix("error: ")
        helpful = errors == lines[-1:] and says_what_to_do(message) and not CONTROL.search(message)
        return Outcome("user error" if helpful else "unhelpful error", errors[-1])
    if code == 1 and not errors and (any(line.startswith("failed ") for line in lines) or _reports_failures(stdout)):
        return Outcome("partial failure", "")
    return Outcome("other", f"exit {code}: {stderr[-500:]}")


# --- one case ----------------------------------------------------------------------------------------------


def user_environment(base: dict[str, str], cache: Path, hub: Path) -> dict[str, str]:
    """The environment of a user with none of our variables, no provider keys, and offline model hubs."""
    kept = {k: v for k, v in base.items() if not k.startswith(("DSPY_RAG_", "OPENAI_", "MLFLOW_", "TAVILY_"))
            and not k.endswith(("_KEY", "_TOKEN", "_SECRET", "_PASSWORD"))}
    return {**kept, "DSPY_RAG_CACHE": str(cache), "HF_HOME": str(hub), "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "100"}


def run_main(argv: tuple[str, ...]) -> tuple[int | None, str, str]:
    """`dspy-rag ARGV` through `main()`: the exit code and what it printed."""
    from dspy_rag.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    code: int | None = 0
    with patch.object(sys, "argv", ["dspy-rag", *argv]), patch.object(sys, "stdin", io.StringIO("")), \
            redirect_stdout(stdout), redirect_stderr(stderr):
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) or exc.code is None else 1
    return code, stdout.getvalue(), stderr.getvalue()


# --- the campaign ------------------------------------------------------------------------------------------


class Campaign:
    """Scratch space, the fence and the tally of a fuzzing run; `run` is one case."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.commands = commands()
        self.tally: dict[str, Counter[str]] = {name: Counter() for name in self.commands}
        self.stops: Counter[str] = Counter()
        self.findings: list[dict[str, Any]] = []
        self.started, self.started_cpu = time.perf_counter(), time.process_time()
        self._stack = ExitStack()
        self._count = 0

    def __enter__(self) -> "Campaign":
        listener = self._stack.enter_context(socket.socket())
        listener.bind(("127.0.0.1", 0))  # bound, never listening: a connection to it is refused at once
        self.dead_port = listener.getsockname()[1]
        self.shared_index = self.scratch / "index"
        self._build_shared_index()
        self.values = Values(str(self.shared_index), self.dead_port)
        self._stack.enter_context(fenced(self.dead_port))
        # Typer builds the click command tree on every call; built once, a case costs a third.
        command = typer.main.get_command(app)
        self._stack.enter_context(patch("typer.main.get_command", lambda _: command))
        # Default work folders (bench, compile) go under the system's temporary folder: keep them in scratch.
        self._stack.enter_context(patch.object(tempfile, "tempdir", str(self.scratch / "tmp")))
        (self.scratch / "tmp").mkdir()
        return self

    def __exit__(self, *_: object) -> None:
        self._stack.close()

    def _build_shared_index(self) -> None:
        """One small index every case may name, so `ask` gets past its 'no documents' check."""
        from dspy_rag.config import load_config
        from dspy_rag.index import Index

        self.shared_index.mkdir(parents=True)
        (self.scratch / "doc.md").write_bytes(FIXTURES["doc.md"])
        with patch("dspy_rag.embeddings._load", return_value=ZeroEncoder()), \
                patch("dspy_rag.embeddings._set_threads"):  # torch's import alone takes seconds
            Index(load_config(overrides={"index.path": self.shared_index}, environ={})).ingest(
                [str(self.scratch / "doc.md")])
        self._forget_vector_stores()

    @staticmethod
    def _forget_vector_stores() -> None:
        # Chroma keeps a client per folder for the life of the process; thousands of scratch folders would pile up.
        from chromadb.api.client import SharedSystemClient

        SharedSystemClient.clear_system_cache()

    def strategy(self, command: str) -> Any:
        return cases(command, self.commands[command], self.values)

    def run(self, case: Case) -> Outcome:
        """Run one generated case and tally its outcome."""
        outcome = self.outcome(case)
        self.tally[case.command][outcome.kind] += 1
        if outcome.kind == "reached work":
            self.stops[outcome.detail.split(" (")[0]] += 1  # "network (example.com)" counts as network
        if outcome.kind in FAILED and len(self.findings) < 50:
            self.findings.append({"command": case.command, "argv": case.argv, "env": dict(case.env),
                                  "files": {name: data.decode("utf-8", "backslashreplace") for name, data in case.files},
                                  "kind": outcome.kind, "detail": outcome.detail})
        return outcome

    def outcome(self, case: Case) -> Outcome:
        """Run one case in a fresh folder: how it ended."""
        self._count += 1
        folder = self.scratch / "cases" / str(self._count)
        work = folder / "w" / "work"  # two levels down: '../outside' stays inside the case's folder
        work.mkdir(parents=True)
        named = "\n".join((*case.argv, *(value for _, value in case.env),
                            *(data.decode("utf-8", "replace") for _, data in case.files)))
        lay_out(work, named if "." not in case.argv else "".join((*FIXTURES, *ODDITIES)))  # '.' walks all of it
        for name, data in case.files:
            (work / name).write_bytes(data)
        if case.ingested:
            (work / ".dspy-rag").mkdir()
            (work / ".dspy-rag" / "index").symlink_to(self.shared_index)
        env = {**user_environment(dict(os.environ), folder / "cache", self.scratch / "hub"), **dict(case.env)}
        home = os.getcwd()
        try:
            with patch.dict(os.environ, env, clear=True), time_limit(CASE_SECONDS):
                os.chdir(work)
                code, stdout, stderr = run_main(case.argv)
            outcome = classify(code, stdout, stderr)
        except ReachedWork as stop:
            outcome = Outcome("reached work", str(stop))
        except Hang:
            outcome = Outcome("hang", "")
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - an escaped exception is the finding
            outcome = Outcome("traceback", f"{type(exc).__name__}: {exc}"[:500])
        finally:
            os.chdir(home)
            self._forget_vector_stores()
            shutil.rmtree(folder, ignore_errors=True)
        return outcome

    def report(self) -> dict[str, Any]:
        outcomes: Counter[str] = sum(self.tally.values(), Counter())
        return {
            "cases": sum(outcomes.values()),
            "seconds": round(time.perf_counter() - self.started, 1),
            "cpu_seconds": round(time.process_time() - self.started_cpu, 1),
            "outcomes": {kind: outcomes[kind] for kind in (*ACCEPTED, *FAILED)},
            "unexpected": outcomes["unexpected"],
            "commands": {name or "(top level)": {"cases": sum(tally.values()), "outcomes": dict(tally)}
                         for name, tally in self.tally.items()},
            "reached_work_at": dict(self.stops.most_common()),
            "findings": self.findings,
        }


def check_command(campaign: Campaign, command: str, cases: int, strict: bool, seed_value: int | None = None) -> None:
    """Run `cases` generated cases of `command`; `strict` fails (after hypothesis shrinks it) at the first case
    of a failed kind, else every case runs and the findings are kept for the report."""

    @settings(max_examples=cases, deadline=None, database=None, derandomize=seed_value is None,
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet)
    @given(case=campaign.strategy(command))
    def one(case: Case) -> None:
        outcome = campaign.run(case)
        if strict:
            assert outcome.kind not in FAILED, f"{outcome.kind}: {outcome.detail}\n{case}"

    (seed(seed_value)(one) if seed_value is not None else one)()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fuzz every dspy-rag command; write the report as JSON.")
    parser.add_argument("--cases", type=int, default=2000, help="cases per command (default 2000)")
    parser.add_argument("--out", type=Path, default=REPORT, help=f"the JSON report (default {REPORT})")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random)")
    options = parser.parse_args(argv)
    chosen_seed = options.seed if options.seed is not None else int.from_bytes(os.urandom(4), "big")
    with tempfile.TemporaryDirectory(prefix="dspy-rag-fuzz-") as scratch, Campaign(Path(scratch)) as campaign:
        for command in campaign.commands:
            check_command(campaign, command, options.cases, strict=False, seed_value=chosen_seed)
            print(f"{command or '(top level)'}: {dict(campaign.tally[command])}", file=sys.stderr)
        report = {"seed": chosen_seed, "cases_per_command": options.cases, **campaign.report()}
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{report['cases']} cases, {report['outcomes']}; report {options.out}", file=sys.stderr)
    return 1 if any(report["outcomes"][kind] for kind in FAILED) else 0


if __name__ == "__main__":
    sys.exit(main())
