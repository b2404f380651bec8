"""Shared fixtures: the real data in ../shared/data, scratch configurations, a real 10-K index, the CLI run
as a user runs it, and fake HTTP services (an OpenAI-compatible LM) on 127.0.0.1.

The real data is found when a test asks for it (the `shared_data` and `tenk_filing` fixtures), so the tests
collect on any clone; without the data those tests skip, or fail where data is required (--require-data, or
$CI set), so CI cannot pass by skipping them."""

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from dspy_rag.config import Config, load_config
from dspy_rag.evals.rows import Row
from dspy_rag.index import Index
from dspy_rag.trainsets import locations

CLI = str(Path(sys.executable).parent / "dspy-rag")
MISSING_DATA = "shared data not found: set SHARED_DATA or clone beside ../shared"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--require-data", action="store_true",
                     help="fail, not skip, the tests that need ../shared/data when it is missing (also when $CI is set)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuses a test that builds the real 10-K index (`tenk_index`) without the slow mark: -m "not slow" stays fast."""
    unmarked = [item.nodeid for item in items
                if "tenk_index" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("slow")]
    if unmarked:
        raise pytest.UsageError("tenk_index builds the real 10-K index; mark these @pytest.mark.slow: "
                                + ", ".join(unmarked))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line saying how many tests skipped for want of the shared data, and how to supply it."""
    skipped = [report for report in terminalreporter.stats.get("skipped", []) if MISSING_DATA in str(report.longrepr)]
    if skipped:
        terminalreporter.write_line(f"{len(skipped)} tests skipped: {MISSING_DATA}", yellow=True)


def in_ci() -> bool:
    """Whether this is a CI run ($CI set), where what a test needs is installed: missing, it is a failure."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


def data_required(config: pytest.Config) -> bool:
    """Whether missing shared data is a failure: asked for with --require-data, or a CI run (which has the data)."""
    return config.getoption("require_data") or in_ci()


@pytest.fixture(scope="session")
def shared_data(request: pytest.FixtureRequest) -> Path:
    """The real data folder ($SHARED_DATA or ../shared/data); without it the test skips, or fails if data is required."""
    try:
        return locations.shared_data()
    except FileNotFoundError as missing:
        if data_required(request.config):
            pytest.fail(f"{missing} (required: --require-data or $CI is set)")
        pytest.skip(MISSING_DATA)


@pytest.fixture(scope="session")
def tenk_filing(shared_data: Path) -> Path:
    """NVIDIA's fiscal-2023 10-K (the HTML filing) in the shared data; skips or fails as `shared_data` does."""
    return locations.tenk_filing()


def user_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """A user's environment: this one without the developer's DSPY_RAG_* or provider keys, plus `env`."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("DSPY_RAG_", "OPENAI_")) or k in ("DSPY_RAG_CACHE", "DSPY_RAG_RUNS")}
    return {**clean, **(env or {})}


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900
            ) -> subprocess.CompletedProcess[str]:
    """The installed `dspy-rag` as a user runs it, without the developer's DSPY_RAG_* or provider keys."""
    return subprocess.run([CLI, *args], cwd=cwd, env=user_environment(env), capture_output=True, text=True,
                          timeout=timeout)


def start_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`run_cli` without waiting: a running command a test can signal, or run beside others.

    Ctrl-C is restored for the command: a shell starts background jobs with SIGINT ignored, pytest inherits
    that when CI runs in the background, and Python then never turns SIGINT into KeyboardInterrupt."""
    return subprocess.Popen([CLI, *args], cwd=cwd, env=user_environment(env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    """`dspy-rag ARGS` through the same entry point, in this process: no start-up cost, so a test can run many."""
    from dspy_rag.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    with patch.object(sys, "argv", ["dspy-rag", *args]), redirect_stdout(stdout), redirect_stderr(stderr):
        try:
            main()
        except SystemExit as exc:
            code = exc.code
    return subprocess.CompletedProcess(list(args), code if isinstance(code, int) else int(code is not None),
                                       stdout.getvalue(), stderr.getvalue())


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str, code: int = 2) -> None:
    """A failed command: a non-zero exit and one `error:` line last on stderr saying what to do, no traceback."""
    assert result.returncode == code, result.stderr
    # Progress lines may precede it; the error is the last line, and the only one.
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert errors == lines[-1:], result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in errors[0]


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test reads the developer's dspy-rag.yaml or DSPY_RAG_* variables, logs to their MLflow or reuses their
stored runs."""
    for name in list(os.environ):
        if name.startswith("DSPY_RAG_") and name != "DSPY_RAG_CACHE" or name == "MLFLOW_TRACKING_URI":
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    # Each test's runs in a store of its own, the `dspy-rag` it starts included: a run stored by one test (or by
    # the developer) would otherwise be reused by the next.
    monkeypatch.setenv("DSPY_RAG_RUNS", str(tmp_path / "runs.sqlite"))
    # Each test's models loaded anew (a test scripts its own) and freed with it, not at interpreter exit.
    from dspy_rag import models

    monkeypatch.setattr(models, "_LOADED", {})


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


class EventStream(list[Any]):
    """A body sent as server-sent events: a `data:` line of JSON for each item, then `data: [DONE]`."""


class JsonServer:
    """A JSON-over-HTTP service on 127.0.0.1: each POST's payload goes to `answer`, whose (status, body) is sent
    back (as server-sent events for an EventStream); every request's headers and payload are kept in `requests`."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append((dict(self.headers), payload))
                status, body = fake.answer(payload)
                streamed = isinstance(body, EventStream)
                events = [f"data: {json.dumps(item)}\n\n" for item in body] + ["data: [DONE]\n\n"] if streamed else []
                data = "".join(events).encode() if streamed else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "text/event-stream" if streamed else "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up first: timeout tests want exactly that

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, payload: dict[str, Any]) -> tuple[int, Any]:
        raise NotImplementedError

    def close(self) -> None:
        self.server.shutdown()


USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}  # each scripted reply's


class FakeLM(JsonServer):
    """An OpenAI-compatible chat endpoint that answers like a scripted DummyLM: the reply whose key the prompt's
    last message contains, whole or, asked to stream, word by word. `plain_answer` is the short answer in plain
    text, as a served model writes it (None: as JSON, like the other replies). A test sets the faults: `status`
    (and `error`, the provider's message), `mangle` (what becomes of the reply text), `delay`, or `hold_after`
    (later requests wait until `release` is set). It counts the requests in flight and the most at once (`peak`)."""

    def __init__(self, replies: dict[str, dict[str, Any]], plain_answer: str | None = None) -> None:
        self.replies = replies
        self.plain_answer = plain_answer
        self.status, self.error, self.delay = 200, "scripted failure", 0.0
        self.mangle: Callable[[str], str] = lambda text: text
        self.hold_after: int | None = None
        self.release = threading.Event()
        self.counting = threading.Lock()
        self.in_flight = self.peak = 0
        super().__init__()

    @property
    def env(self) -> dict[str, str]:
        """The settings that point dspy-rag at this endpoint."""
        return {"DSPY_RAG_LM_MODEL": "openai/fake", "DSPY_RAG_LM_API_BASE": self.url + "/v1"}

    def answer(self, payload: dict[str, Any]) -> tuple[int, Any]:
        with self.counting:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            return self.scripted_answer(payload)
        finally:
            with self.counting:
                self.in_flight -= 1

    def scripted_answer(self, payload: dict[str, Any]) -> tuple[int, Any]:
        if self.hold_after is not None and len(self.requests) > self.hold_after:
            self.release.wait(timeout=120)
        time.sleep(self.delay)
        if self.status != 200:
            return self.status, {"error": {"message": self.error, "type": "invalid_request_error"}}
        text = self.mangle(self.reply(payload))
        if payload.get("stream"):
            return 200, EventStream(self.chunks(payload, text))
        message = {"role": "assistant", "content": text}
        return 200, {"id": "fake", "object": "chat.completion", "created": 0, "model": payload["model"],
                     "choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": USAGE}

    @staticmethod
    def chunks(payload: dict[str, Any], text: str) -> list[dict[str, Any]]:
        """A streamed reply: a chunk for each word (with the spaces after it), the finish, and the usage when the
        client asks for it."""
        def chunk(delta: dict[str, str], finish: str | None = None) -> dict[str, Any]:
            return {"id": "fake", "object": "chat.completion.chunk", "created": 0, "model": payload["model"],
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        chunks = [chunk({"content": word}) for word in re.findall(r"\s*\S+\s*", text)] + [chunk({}, "stop")]
        if (payload.get("stream_options") or {}).get("include_usage"):
            chunks.append({**chunk({}), "choices": [], "usage": USAGE})
        return chunks

    def reply(self, payload: dict[str, Any]) -> str:
        """The reply's text: the scripted reply whose key the last message contains, as JSON."""
        prompt = payload["messages"][-1]["content"]
        if self.plain_answer is not None and SHORT_ANSWER_PROMPT in prompt:
            return self.plain_answer
        return json.dumps(next((r for key, r in self.replies.items() if key in prompt), {}))

    def close(self) -> None:
        self.release.set()
        super().close()


def without_times(document: Any) -> Any:
    """A document with its timings removed: two runs of the same research differ in nothing else."""
    if isinstance(document, dict):
        return {k: without_times(v) for k, v in document.items() if k not in ("seconds", "lm_seconds")}
    if isinstance(document, list):
        return [without_times(v) for v in document]
    return document


def scratch_config(root: Path, **overrides: object) -> Config:
    return load_config(overrides={"index.path": root / "index", **overrides}, environ={})


def ingested(root: Path, name: str, text: str) -> Path:
    """A small real index (real Chroma, real embeddings) under `root` of one document, `name` holding `text`: its
    folder."""
    (root / name).write_text(text)
    Index(scratch_config(root)).ingest([str(root / name)])
    return root / "index"


@contextmanager
def llama_cpp_server() -> Iterator[str]:
    """llama.cpp's own OpenAI-compatible server (llama-cpp-python's) serving the local 0.5B on a free port, for the
    duration of a block: its base URL."""
    from dspy_rag.models import ensure_local_model, lookup

    port = free_port()
    gguf = ensure_local_model(lookup("local/qwen2.5-coder-0.5b"))
    base = f"http://127.0.0.1:{port}/v1"
    with running_server([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "qwen",
                         "--host", "127.0.0.1", "--port", str(port), "--n_threads", "2", "--n_ctx", "4096"],
                        f"{base}/models"):
        yield base


@pytest.fixture(scope="session")
def tenk_index(tmp_path_factory: pytest.TempPathFactory, tenk_filing: Path) -> Index:
    """The real 10-K ingested once per session into real Chroma with real embeddings (a test using it is slow)."""
    index = Index(scratch_config(tmp_path_factory.mktemp("tenk")))
    index.ingest([str(tenk_filing)])
    return index


SHORT_ANSWER_PROMPT = "Question:\n"  # in the short answer's prompt alone
FACTS = ("NVIDIA's Data Center revenue for fiscal year 2023 was $15.01 billion, up 41% from a year ago.\n\n"
         "Gaming revenue for fiscal year 2023 was $9.07 billion, down 27% from a year ago.\n")
# A scripted LM's replies for the deep program, chosen by the output fields each prompt asks for: every run
# plans one step and answers "$15.01 billion".
REPLIES: dict[str, dict[str, Any]] = {
    "`steps`": {"steps": [{"sub_question": "Data Center revenue in fiscal 2023?", "tool": "search_docs",
                           "keywords": ["Data Center"], "section": None, "justification": "one fact"}]},
    "`query`": {"query": "Data Center revenue fiscal 2023"},
    "`strategy`": {"strategy": "hybrid", "reason": "figures"},
    "`context`": {"context": "Data Center revenue was $15.01 billion [1].", "used_passages": [1]},
    "`finding`": {"finding": "Data Center revenue was $15.01 billion."},
    "`decision`": {"decision": "FINISH", "reason": "answered"},
    # The short answer's plain prompt ends with the question; the JSON ones name their fields.
    SHORT_ANSWER_PROMPT: {"short_answer": "$15.01 billion"},
}
# The distiller and the reflection are off by default: no notes or finding call.
CALLS_PER_RUN = len([k for k in REPLIES if k not in ("`context`", "`finding`")])


def scripted_lms(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *owners: object) -> list[Any]:
    """Every LM built through the `build_lm` of the modules in `owners` a DummyLM answering with REPLIES (kept in
    the list, in the order built); and a dspy-rag.yaml in `tmp_path` with its own artifacts and index, no reranker."""
    import dspy
    from dspy.utils import DummyLM

    made: list[DummyLM] = []

    def build_lm(_config: Any) -> DummyLM:
        made.append(DummyLM(REPLIES, adapter=dspy.JSONAdapter()))
        return made[-1]

    for owner in owners:
        monkeypatch.setattr(owner, "build_lm", build_lm)
    (tmp_path / "dspy-rag.yaml").write_text(f"artifacts: {{path: {tmp_path / 'artifacts'}}}\n"
                                            f"index: {{path: {tmp_path / 'index'}}}\nretrieval: {{reranker: none}}\n")
    return made


@pytest.fixture()
def fake_lm() -> Iterator[FakeLM]:
    """A scripted OpenAI-compatible LM for every program: each deep run plans one step over the documents."""
    server = FakeLM(REPLIES)
    yield server
    server.close()


@pytest.fixture(scope="module")
def script() -> Iterator[FakeLM]:
    """The scripted LM of `fake_lm` for a whole module (a server started once per module answers with it), the
    short answer written in plain words, word by word when streamed."""
    server = FakeLM(REPLIES, plain_answer="$15.01 billion")
    yield server
    server.close()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's folder with the facts ingested (one chunk, in one section), for a whole module."""
    root = tmp_path_factory.mktemp("facts")
    (root / "facts.md").write_text(FACTS)
    Index(scratch_config(root)).ingest([str(root / "facts.md")])
    return root


@pytest.fixture()
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_lm: FakeLM) -> Path:
    """A user's working folder (the current one) with the facts ingested and the scripted LM configured."""
    for name, value in fake_lm.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DSPY_RAG_CACHE", str(tmp_path / "cache"))
    (tmp_path / "facts.md").write_text(FACTS)
    assert invoke("ingest", "facts.md").returncode == 0
    return tmp_path


def tree(folder: Path) -> dict[str, bytes]:
    """Every file below `folder` (hidden ones included) with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _question(n: int, answer: str, split: str) -> dict[str, Any]:
    return {"id": f"q{n}", "question": f"Question {n}: what was the revenue?", "answer": answer, "split": split}


@pytest.fixture()
def trainset(tmp_path: Path) -> Path:
    """A tiny trainset over two facts: the scripted answer is right for q1, q3 (train) and q5 (dev), wrong for
    q2, q4 (train) and q6 (dev); q1 carries a gold plan."""
    (tmp_path / "facts.md").write_text(FACTS)
    planned = {**_question(1, "$15.01 billion", "train"),
               "plan": [{"sub_question": "What was Data Center revenue?", "tool": "search_docs"}]}
    rows = [planned, _question(2, "Jensen Huang", "train"),
            _question(3, "15.01 billion", "train"), _question(4, "41%", "train"),
            _question(5, "$15.01 billion", "dev"), _question(6, "Jensen Huang", "dev")]
    (tmp_path / "qs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "tiny.yaml").write_text("name: tiny\ndescription: two facts\nquestions: qs.jsonl\n"
                                        "documents: [facts.md]\nsplit: {field: split}\n")
    return tmp_path / "tiny.yaml"


GAMING = "# Gaming\n\nGaming revenue for fiscal year 2023 was $9.07 billion, down 27% from a year ago.\n"


def planned(n: int, answer: str, split: str) -> dict[str, Any]:
    return {"id": f"p{n}", "question": f"Other question {n}?", "answer": answer, "split": split,
            "plan": [{"sub_question": f"Step of question {n}?", "tool": "search_docs"}]}


@pytest.fixture()
def other(tmp_path: Path) -> Path:
    """A second small set over another document: yes/no and name questions, each with a gold plan, and a figure
    labeled with its gold section only."""
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "gaming.md").write_text(GAMING)
    sectioned = {"id": "p4", "question": "What was Gaming revenue?", "answer": "$9.07 billion", "split": "train",
                 "gold_sections": ["Gaming"]}
    rows = [planned(1, "yes", "train"), planned(2, "Jensen Huang", "train"), planned(3, "no", "dev"), sectioned]
    (folder / "qs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "other.yaml").write_text("name: other\ndescription: gaming\nquestions: qs.jsonl\n"
                                       "documents: [gaming.md]\nsplit: {field: split}\n")
    return folder / "other.yaml"


def eval_row(set_name: str, column: str, question: str, f1: float) -> Row:
    """An eval row whose answer scores `f1` on every answer measure, with fixed costs."""
    return Row(set_name, column, question, "q?", "gold", "answer", f1, f1, f1, 1.0, 1.0, 5, 1000, 20.0, 18.0, 1, None)


def results_folder(path: Path, rows: list[Row]) -> Path:
    """An `eval --out` folder holding `rows`."""
    path.mkdir()
    (path / "rows.jsonl").write_text("".join(json.dumps(asdict(r)) + "\n" for r in rows), encoding="utf-8")
    return path
