"""`dspy-rag mcp`: the assistant as tools for MCP clients (desktop assistants, editors), on the official SDK.

`research` is the HTTP server's research run (its model, line, worker and step events: `Server` in
dspy_rag.server.app), each step sent as a progress notification, answered with the document `ask --json` prints;
`search` is the index's own recall (dspy_rag.retrieval); `list_sections` is what the index holds. Every refusal
is a tool error of one line, secrets masked, never a traceback."""

import asyncio
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, InputRequiredResult
from pydantic import Field, ValidationError
from starlette.types import ASGIApp

from dspy_rag import __version__
from dspy_rag.api import clean_question
from dspy_rag.config import Config
from dspy_rag.errors import UserError
from dspy_rag.index import Index
from dspy_rag.retrieval import Retriever, Strategy
from dspy_rag.sections import match_sections
from dspy_rag.server.app import RETRY_SECONDS, NotReady, Server
from dspy_rag.server.bodies import ArtifactName, Budgets, Pipeline, PolicyName, ResearchBody, WebProvider, problem
from dspy_rag.server.gate import Gate, gate_options
from dspy_rag.server.line import LineFull
from dspy_rag.server.runs import log, reason

Question = Annotated[str, Field(description="the question, in plain words (up to 2,000 characters)")]
Query = Annotated[str, Field(description="what to look for: words or a question (up to 2,000 characters)")]
SearchStrategy = Annotated[Strategy, Field(
    description="vector (meaning), keyword (BM25) or hybrid (both, fused by reciprocal rank)")]
Section = Annotated[str | None, Field(description="only this section, named loosely (e.g. 'Item 7' or 'risk "
                                      "factors'); one the index does not hold searches everything")]
Limit = Annotated[int | None, Field(ge=1, le=50, description="passages returned (default retrieval.top_n)")]


def note(kind: str, data: dict[str, Any]) -> str:
    """A research event as `ask` shows its progress line: "kind text", or the text alone."""
    if kind == "queued":
        return f"waiting for the model: {data['position']} in line"
    return data["text"] if kind == "progress" else f"{kind} {data['text']}"


def refusal(exc: ToolError) -> str:
    """A failed call as the one line its client reads: the project's own message for bad arguments and known
    failures; an unexpected one is named and logged in one line."""
    cause = exc.__cause__
    if isinstance(cause, ValidationError):
        return problem(cause.errors(), "the arguments")
    if isinstance(cause, LineFull):
        return f"busy: {reason(cause)}; retry in {RETRY_SECONDS} s"
    if isinstance(cause, UserError | NotReady):
        return reason(cause)
    if cause is None:  # the SDK's own refusal, e.g. an unknown tool
        return reason(exc)
    log.error("%s: %s: %s", exc, type(cause).__name__, reason(cause))
    return f"unexpected {type(cause).__name__}: {reason(cause)}"


class OneLineErrors(MCPServer):
    """The SDK's server, with every failed call's text made one line (pydantic's are several, with a link)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None
                        ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            raise ToolError(refusal(exc)) from None  # from None: the SDK logs no traceback of a known failure


class Assistant:
    """One MCP server's state: the HTTP server's (the model, loaded on the first research, and its runs) and the
    index that `search` and `list_sections` read, opened on first use."""

    def __init__(self, settings: Config, lm: Any = None) -> None:
        self.settings = settings
        self.server = Server(settings, lm)
        self.loading = asyncio.Lock()
        # One thread reads the index: its catalog and vector store are not shared between threads.
        self.reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="search")
        self.index: Index | None = None

    async def research(self, question: Question, ctx: Context, pipeline: Pipeline | None = None,
                       policy: PolicyName | None = None, artifact: ArtifactName | None = None,
                       web: WebProvider | None = None, budgets: Budgets | None = None) -> dict[str, Any]:
        """Research a question over the indexed documents (and the web, when on) as `dspy-rag ask` does; each step
        is reported as progress. Returns the cited answer, the short answer, the citations (source, section,
        chunk id), unsupported sentences and the trajectory: the document `dspy-rag ask --json` prints."""
        clean_question(question)  # the project's refusal of an empty question, before pydantic's
        options = {"pipeline": pipeline, "policy": policy, "artifact": artifact, "web": web, "budgets": budgets}
        body = ResearchBody.model_validate({"question": question, "stream": False,
                                            **{name: value for name, value in options.items() if value is not None}})
        self.server.check(body)  # before the model loads
        await self._load(ctx)
        run = self.server.start(body)
        told = 0
        try:
            async for kind, data in run.stream():  # it ends with the answer or the error
                if kind in ("answer", "error"):
                    break
                told += 1
                await ctx.report_progress(told, message=note(kind, data))
        finally:
            run.cancel()  # a client that went away (or cancelled the call) stops its run at the next step
        if kind == "error":
            raise UserError(data["error"])
        return data

    async def _load(self, ctx: Context) -> None:
        """The model, loaded by the first research (search needs none), as `dspy-rag serve` loads it."""
        async with self.loading:
            if self.server.status == "loading":
                await ctx.report_progress(0, message=f"loading {self.settings.lm.model}")
                await self.server.load()

    async def search(self, query: Query, strategy: SearchStrategy = "hybrid", section: Section = None,
                     limit: Limit = None) -> dict[str, Any]:
        """Search the indexed documents without the language model: the best passages (id, text, source, section,
        score) and the sections searched (none: all)."""
        text = clean_question(query, "query", "search for something, e.g. Data Center revenue")
        retrieval = self.settings.retrieval

        def found(index: Index) -> dict[str, Any]:
            passages = Retriever(index, retrieval.top_k, retrieval.rrf_k).search(text, strategy, section)
            return {"query": text, "strategy": strategy,
                    "sections": match_sections(section, index.section_titles) if section else [],
                    "passages": [vars(p) for p in passages[: limit or retrieval.top_n]]}

        return await self._read(found)

    async def list_sections(self) -> dict[str, Any]:
        """The indexed documents: each source with its kind, chunk count, section titles and time of ingest."""
        return await self._read(lambda index: {"index": str(index.root), "chunks": index.chunk_count, "sources": [
            {"source": name, **about} for name, about in index.sources.items()]})

    async def _read(self, work: Callable[[Index], dict[str, Any]]) -> dict[str, Any]:
        def opened() -> dict[str, Any]:
            if self.index is None:  # kept once open; a missing index is looked for again next time
                self.index = Index(self.settings).require()
            return work(self.index)

        return await asyncio.get_running_loop().run_in_executor(self.reader, opened)

    def close(self) -> None:
        self.server.runs.close()
        self.reader.shutdown(wait=False, cancel_futures=True)


def create_mcp(settings: Config, lm: Any = None) -> OneLineErrors:
    """The MCP server over `settings` (the CLI's configuration); `lm` a model already loaded, else the configured
    one loads on the first research."""
    assistant = Assistant(settings, lm)

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[None]:
        try:
            yield
        finally:
            assistant.close()

    mcp = OneLineErrors("dspy-rag", version=__version__, lifespan=lifespan,
                        instructions="Research questions over the user's indexed documents (and the web, when on) "
                        "with cited answers; search them directly; list what they hold.")
    for tool in (assistant.research, assistant.search, assistant.list_sections):
        mcp.add_tool(tool)
    return mcp


def http_app(settings: Config) -> ASGIApp:
    """The MCP server over streamable HTTP at /mcp, behind the HTTP server's gate: its token and body limit."""
    app = create_mcp(settings).streamable_http_app(host=settings.serve.host)
    return Gate(app, **gate_options(settings.serve))
