"""`dspy-rag serve` as the tests run it: the application on a real uvicorn server on 127.0.0.1, over a user's
configuration whose model is the scripted one."""

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from conftest import FakeLM, free_port
from dspy_rag.config import load_config


@contextmanager
def on_uvicorn(app: Any, ready: Callable[[str], bool] = lambda _: True) -> Iterator[str]:
    """`app` on a real uvicorn server on 127.0.0.1 until the block ends; yields its URL once it listens and
    `ready(url)` holds."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300  # a loaded machine opens the index and reranker slowly
    try:
        while not server.started or not ready(url):
            assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
            time.sleep(0.05)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextmanager
def serving(environ: dict[str, str], **overrides: object) -> Iterator[str]:
    """The application on a real uvicorn server, over the configuration `environ` and `overrides` make (as
    `dspy-rag serve` starts it), until the block ends; yields its URL once /health says ready."""
    from dspy_rag.server import create_app

    token = environ.get("DSPY_RAG_SERVE_TOKEN")
    headers = {"authorization": f"Bearer {token}"} if token else {}
    with on_uvicorn(create_app(load_config(overrides=overrides, environ=environ)),
                    lambda url: httpx.get(url + "/health", headers=headers).json()["status"] != "loading") as url:
        yield url


def environment(folder: Path, lm: FakeLM) -> dict[str, str]:
    """The settings of a user whose index is in `folder` and whose model is the scripted one."""
    # Absolute: the module's server outlives each test's working folder.
    return {**lm.env, "DSPY_RAG_INDEX_PATH": str(folder / "index"), "DSPY_RAG_ARTIFACTS_PATH": str(folder / "artifacts")}


def recompiled(artifacts: Path) -> None:
    """A ledger in `artifacts`: the uncompiled program evaluated, v1 compiled from it and v2 recompiled from v1,
    three points of one lineage to plot."""
    from dspy_rag.ledger import LEDGER_FILE, LedgerEntry, append

    for kind, artifact, parent, score, before in [("eval", None, None, 0.40, None), ("compile", "v1", None, 0.50, 0.38),
                                                  ("compile", "v2", "v1", 0.55, 0.49)]:
        append(artifacts / LEDGER_FILE, LedgerEntry(kind=kind, artifact=artifact, parent=parent, model="openai/fake",
                                                    trainset="tiny", trainset_hash="abc", split="dev", metric="f1",
                                                    score=score, score_before=before, questions=6))
