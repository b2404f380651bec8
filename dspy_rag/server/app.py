"""The HTTP application: health, research streamed as server-sent events (or answered whole), an
OpenAI-compatible chat endpoint, finished trajectories, the passages answers cite, the ledger's history, ingest
when the configuration allows it, and the web page over them."""

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException

from dspy_rag.api import clean_question
from dspy_rag.catalog import Catalog
from dspy_rag.chunking import CHUNK_ID, Chunk
from dspy_rag.config import Config
from dspy_rag.errors import UserError, one_line
from dspy_rag.ledger import ledger_path, read
from dspy_rag.optimizers.history import lineages, report
from dspy_rag.server import chat
from dspy_rag.server.bodies import ChatBody, IngestBody, ResearchBody, problem
from dspy_rag.server.gate import Gate, gate_options
from dspy_rag.server.line import Line, LineFull
from dspy_rag.server.page import add_page, public_paths
from dspy_rag.server.runs import Event, Run, Runs, log, reason

RETRY_SECONDS = 30  # about one deep run on the embedded model: when a full line may have room again
RUN_ID = re.compile(r"[0-9a-f]{32}")


class NotReady(Exception):
    """The model is still loading, or failed to."""


class Server:
    """One server's state: its configuration, the model once loaded, and the runs."""

    def __init__(self, settings: Config, lm: Any = None) -> None:
        self.settings = settings
        self.status = "loading"
        self.problem: str | None = None
        self.about: dict[str, Any] = {"chunks": None, "artifact": None, "reranker": None}
        # The embedded model computes one call at a time; a served one takes calls from several runs at once.
        parallel = 1 if settings.lm.embedded else settings.serve.parallel
        self.runs = Runs(settings, lm, Line(parallel=parallel, room=settings.serve.queue))

    async def load(self) -> None:
        """Load the model, then open the default program once: what /health reports, and a check of the index."""
        from dspy_rag.models import build_lm

        try:
            if self.runs.lm is None:
                self.runs.lm = await asyncio.to_thread(build_lm, self.settings.lm)
            research = await asyncio.get_running_loop().run_in_executor(
                self.runs.worker, self.runs.program, ResearchBody(question="?"))
            self.about = {"chunks": research.index.chunk_count, "artifact": research.program.artifact,
                          "reranker": research.reranker}
            self.status = "ready"
            self.problem = None
        except UserError as exc:  # e.g. no index yet: runs still try, and succeed once one is ingested
            self.status, self.problem = "unready", reason(exc)
        except Exception as exc:  # shown by /health, not left as a server loading for ever
            log.error("loading failed: %s: %s", type(exc).__name__, reason(exc))
            self.status, self.problem = "unready", f"unexpected {type(exc).__name__}: {reason(exc)}"

    def check(self, body: ResearchBody) -> None:
        """Refuses the body's question or budgets now, not after a wait in the line (UserError)."""
        clean_question(body.question)
        body.settings(self.settings)

    def start(self, body: ResearchBody) -> Run:
        if self.runs.lm is None:
            raise NotReady(self.problem or f"{self.settings.lm.model} is still loading; retry in a moment")
        self.check(body)
        return self.runs.start(body)


def frame(kind: str, data: Any) -> str:
    """One server-sent event."""
    return f"event: {kind}\ndata: {json.dumps(data, default=str)}\n\n"


async def disconnected(request: Request) -> None:
    """Returns when the client has gone away."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def outcome(run: Run, request: Request) -> Event | None:
    """The run's last event (its answer or error); None when the client went away first, which cancels it."""

    async def last() -> Event | None:
        seen = [event async for event in run.stream()]
        return seen[-1] if seen else None

    finished, gone = asyncio.create_task(last()), asyncio.create_task(disconnected(request))
    try:
        await asyncio.wait({finished, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not finished.done():
        run.cancel()
        finished.cancel()
        return None
    return finished.result()


async def document(run: Run, request: Request) -> dict[str, Any]:
    """The run's answer, `ask --json`'s document; its error as the response's."""
    ended = await outcome(run, request)
    if ended is None:  # no one is left to read it
        raise HTTPException(499, "the client went away")
    kind, data = ended
    if kind == "error":
        raise HTTPException(data["status"], data["error"])
    return data


def create_app(settings: Config, lm: Any = None) -> FastAPI:
    """The application over `settings` (the CLI's configuration); `lm` a model already loaded, else the configured
    one loads when the server starts (/health says loading until then)."""
    server = Server(settings, lm)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        loading = asyncio.create_task(server.load())
        yield
        loading.cancel()
        server.runs.close()

    # No interactive docs: their page loads its scripts from a CDN, and the server works offline.
    app = FastAPI(title="dspy-rag", lifespan=lifespan, docs_url=None, redoc_url=None, redirect_slashes=False)
    app.add_middleware(Gate, **gate_options(settings.serve), public=public_paths())
    app.state.server = server
    errors(app)
    add_page(app)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Whether the server can answer, with the model, index, artifact and reranker it answers with."""
        line = server.runs.line
        return {"status": server.status, "model": settings.lm.model, "index": str(settings.index.path),
                **server.about, "problem": server.problem,
                "queue": {"running": line.running, "parallel": line.parallel, "waiting": len(line.waiting),
                          "room": line.room}}

    @app.post("/v1/research", response_model=None)
    async def research(body: ResearchBody, request: Request) -> StreamingResponse | JSONResponse:
        """`ask`: its steps as server-sent events, ending with `answer`, the document `ask --json` prints
        (`stream: false`: that document alone)."""
        run = server.start(body)
        if body.stream:
            return StreamingResponse(events(run), media_type="text/event-stream",
                                     headers={"cache-control": "no-cache", "x-run-id": run.id})
        return JSONResponse(await document(run, request), headers={"x-run-id": run.id})

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatBody, request: Request) -> StreamingResponse | JSONResponse:
        """OpenAI's chat completions, model `dspy-rag`: the last user message researched by the deep program."""
        if body.model != chat.MODEL:
            raise HTTPException(404, f"model '{body.model}' is not served here; use {chat.MODEL}")
        run = server.start(ResearchBody(question=body.question(), stream=body.stream))
        if body.stream:
            return StreamingResponse(chat_events(run), media_type="text/event-stream",
                                     headers={"cache-control": "no-cache"})
        return JSONResponse(chat.completion(run.id, await document(run, request)))

    @app.get("/v1/trajectories/{run_id}")
    async def trajectory(run_id: str) -> dict[str, Any]:
        """A finished deep run's trajectory, by the id its stream began with."""
        if not RUN_ID.fullmatch(run_id) or run_id not in server.runs.trajectories:
            raise HTTPException(404, "no finished deep run has this id; the server keeps the last "
                                f"{settings.serve.trajectories} (serve.trajectories)")
        return server.runs.trajectories[run_id]

    @app.get("/v1/passages/{chunk_id}")
    async def passage(chunk_id: str) -> dict[str, Any]:
        """An indexed passage by the chunk id a citation names: its source, section and text."""
        found = await asyncio.to_thread(indexed_chunk, settings, chunk_id) if CHUNK_ID.fullmatch(chunk_id) else None
        if found is None:
            raise HTTPException(404, "no indexed passage has this id; a citation's chunk_id names one (the text "
                                "of a web page is not kept)")
        return {"id": found.id, "source": found.source, "section": found.section, "text": found.text}

    @app.get("/v1/history")
    async def history() -> dict[str, Any]:
        """`dspy-rag history --json`: the ledger's compiles and evaluations per lineage, with the points to plot."""
        path = ledger_path(settings)
        return report(path, lineages(await asyncio.to_thread(read, path)))

    @app.post("/v1/ingest")
    async def ingest(body: IngestBody) -> dict[str, Any]:
        """`ingest --json`, when serve.ingest allows it: the files, folders or URLs read into the index."""
        from dspy_rag.index import Index

        if not settings.serve.ingest:
            raise HTTPException(403, "ingest is off on this server; start it with serve.ingest: true to allow it")
        store = Index(settings)
        report = await asyncio.to_thread(store.ingest, body.inputs, lambda *_: None)
        server.runs.forget()  # their indexes are as they were before: the next runs open the new one
        await server.load()  # what /health reports of the index, and ready now if it had none
        return store.summary(report)

    return app


def indexed_chunk(settings: Config, chunk_id: str) -> Chunk | None:
    """The committed chunk of this id in the configured index, read from its catalog alone."""
    catalog = Catalog(settings.index.path, settings.embedding.model)
    try:
        return catalog.chunks([chunk_id]).get(chunk_id)
    finally:
        catalog.close()


async def events(run: Run) -> AsyncIterator[str]:
    """The research's server-sent events: `run` (its id), `queued` while it waits, each step as it happens, the
    short answer's `token`s as the model writes them, and `answer` or `error` last. The client leaving ends the
    stream, which cancels the run."""
    try:
        yield frame("run", {"id": run.id})
        async for kind, data in run.stream():
            yield frame(kind, data)
    finally:
        run.cancel()


async def chat_events(run: Run) -> AsyncIterator[str]:
    """A streamed chat completion: the steps as SSE comments (clients skip them; they keep the stream alive), the
    short answer as content as the model writes it, then the rest of the message, then [DONE]."""
    message = chat.Streamed()
    try:
        yield f"data: {json.dumps(chat.chunk(run.id, {'role': 'assistant', 'content': ''}))}\n\n"
        async for kind, data in run.stream():
            if kind == "token":
                yield f"data: {json.dumps(chat.chunk(run.id, {'content': message.written(data['text'])}))}\n\n"
            elif kind == "answer":
                yield f"data: {json.dumps(chat.chunk(run.id, {'content': message.rest(data)}))}\n\n"
                yield f"data: {json.dumps(chat.chunk(run.id, {}, 'stop'))}\n\n"
            elif kind == "error":
                yield f"data: {json.dumps({'error': {'message': data['error'], 'code': data['status']}})}\n\n"
            else:
                yield f": {kind} {json.dumps(data, default=str)}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        run.cancel()


def errors(app: FastAPI) -> None:
    """Every refusal as a 4xx (or 503) with a one-line JSON reason."""

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        if exc.errors()[0]["type"] == "json_invalid":
            return JSONResponse({"error": "the body is not valid JSON; send a JSON object"}, status_code=400)
        return JSONResponse({"error": problem(exc.errors(), "the body")}, status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        text = exc.detail if exc.status_code != 404 or exc.detail != "Not Found" else (
            f"no route {request.method} {request.url.path}; see /health, /v1/research, /v1/chat/completions")
        return JSONResponse({"error": one_line(str(text))}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(UserError)
    async def user_error(_: Request, exc: UserError) -> JSONResponse:
        return JSONResponse({"error": reason(exc)}, status_code=400)

    @app.exception_handler(LineFull)
    async def full(_: Request, exc: LineFull) -> JSONResponse:
        return JSONResponse({"error": f"busy: {exc}; retry in {RETRY_SECONDS} s"}, status_code=503,
                            headers={"retry-after": str(RETRY_SECONDS)})

    @app.exception_handler(NotReady)
    async def not_ready(_: Request, exc: NotReady) -> JSONResponse:
        return JSONResponse({"error": reason(exc)}, status_code=503, headers={"retry-after": "5"})
