"""The fence of the fuzzing campaign (fuzz_cli.py): every entry point of real work raises `ReachedWork`, so a
case that passes every check is stopped where it would load a model, read a dataset, embed documents or talk to
the network. `ReachedWork` is a BaseException: no `except Exception` of the code under test swallows it.
Connections go nowhere but to one port on 127.0.0.1 where nothing listens, so a case that points a server
setting there sees the real refusal, and the one-line error it makes."""

import signal
import socket
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, NoReturn
from unittest.mock import patch

import numpy as np

LOOPBACK = ("127.0.0.1", "localhost", "::1")
# Where real work starts, and what the report calls it.
WORK = (("dspy_rag.embeddings.SentenceEmbedding.embed", "embedding model"),
        ("dspy_rag.models.LocalModel.part_paths", "local model"),
        ("dspy_rag.llama_engine.LlamaEngine.__init__", "local model"),
        ("dspy_rag.reranker.MiniLMReranker.load", "reranker"),
        ("dspy_rag.optimizers.train_reranker.train_reranker", "reranker training"),
        ("dspy_rag.cli.bench.scaling", "synthetic corpora"),  # patched where the command imports it
        ("uvicorn.run", "server"),
        ("mcp.server.mcpserver.MCPServer.run", "server"))  # `mcp` over stdio; `mcp --http` meets uvicorn.run


class ReachedWork(BaseException):
    """A case got past every check to where real work starts; the fence stopped it there."""


class Hang(BaseException):
    """A case outlived its time limit."""


def _stop(what: str) -> Callable[..., NoReturn]:
    def stopped(*_: Any, **__: Any) -> NoReturn:
        raise ReachedWork(what)

    return stopped


class ZeroEncoder:
    """Stands in for the embedding model where no real work is fenced off (the campaign's shared index, a
    query): every text the same vector."""

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        return np.ones((len(texts), 384), dtype=np.float32)


@contextmanager
def fenced(dead_port: int) -> Iterator[None]:
    """Real work raises ReachedWork; so does any connection but to `dead_port` on the loopback."""
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def connect(sock: socket.socket, address: Any) -> None:
        if sock.family == socket.AF_UNIX or (address[0] in LOOPBACK and address[1] == dead_port):
            return real_connect(sock, address)
        raise ReachedWork(f"network ({address[0]})")

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host in LOOPBACK or host is None:
            return real_getaddrinfo(host, *args, **kwargs)
        raise ReachedWork(f"network ({host})")

    # `datasets` reads every question and corpus file; its import alone costs seconds.
    datasets = types.ModuleType("datasets")
    datasets.load_dataset = _stop("dataset read")  # type: ignore[attr-defined]
    with ExitStack() as stack:
        for target, what in WORK:
            stack.enter_context(patch(target, _stop(what)))
        # A query's vector is no real work, and with it a case gets as far as its first LM call.
        stack.enter_context(patch("dspy_rag.embeddings.SentenceEmbedding.embed_query",
                                  lambda _, texts: list(ZeroEncoder().encode(list(texts)))))
        # DSPy retries a refused connection three times, 7 s of back-off: the retries still run, without the wait.
        stack.enter_context(patch("dspy.clients.execution._delay", return_value=0))
        stack.enter_context(patch.object(socket.socket, "connect", connect))
        stack.enter_context(patch.object(socket.socket, "connect_ex", connect))
        stack.enter_context(patch.object(socket, "getaddrinfo", getaddrinfo))
        stack.enter_context(patch.dict(sys.modules, {"datasets": datasets}))
        yield


def _alarm(*_: Any) -> NoReturn:
    raise Hang()


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Hang raised in the block once `seconds` have passed (the main thread only: signals land there)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
