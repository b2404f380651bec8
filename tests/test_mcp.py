"""`dspy-rag mcp`: the official SDK's client against the installed command over stdio (a real subprocess answering
with the scripted LM of the other tests), against a real streamable-HTTP server on 127.0.0.1, and in memory for a
server without an index: the three tools, each research step as a progress notification, `ask --json`'s document
as the answer, bad input as a one-line tool error, and no secret in a result or the log."""

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, Tool

from conftest import CLI, FACTS, FakeLM, free_port, invoke, scratch_config, user_environment, without_times
from dspy_rag.config import load_config
from dspy_rag.index import Index
from dspy_rag.retrieval import Retriever

QUESTION = "What was NVIDIA's Data Center revenue in fiscal 2023?"
SECRET = "sk-acme-5b1f0c9e7d2a4386"  # a provider key in the server's environment, quoted back by a failing model
TOKEN = "tok-mcp-0c4e9a17b2d85f36"


class Session:
    """An SDK client session driven from these synchronous tests through an anyio portal."""

    def __init__(self, portal: BlockingPortal, client: Client) -> None:
        self.portal = portal
        self.client = client

    def tools(self) -> dict[str, Tool]:
        return {tool.name: tool for tool in self.portal.call(self.client.list_tools).tools}

    def __call__(self, tool: str, arguments: dict[str, Any] | None = None,
                 progress: list[tuple[float, str | None]] | None = None) -> CallToolResult:
        """The tool's result; `progress` collects the notifications heard meanwhile, as (progress, message)."""

        async def heard(done: float, _total: float | None, message: str | None) -> None:
            progress.append((done, message))

        return self.portal.call(partial(self.client.call_tool, tool, arguments or {},
                                        progress_callback=heard if progress is not None else None))


@contextmanager
def connected(target: Any, timeout: float = 300) -> Iterator[Session]:
    """A session on `target`: anything `mcp.Client` takes (a transport, or a server in memory); a call may take
    `timeout` seconds."""
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(
            Client(target, read_timeout_seconds=timeout)) as client:
        yield Session(portal, client)


def environment(folder: Path, lm: FakeLM) -> dict[str, str]:
    """A user's settings: the index in `folder`, the scripted model, and a provider key in the environment. No
    reranker: loading one would double the time the module takes, and the tools reach it through `ask`'s code."""
    return {**lm.env, "DSPY_RAG_INDEX_PATH": str(folder / "index"), "DSPY_RAG_RETRIEVAL_RERANKER": "none",
            "DSPY_RAG_ARTIFACTS_PATH": str(folder / "artifacts"), "ACME_API_KEY": SECRET}


@pytest.fixture(scope="module")
def stdio(folder: Path, script: FakeLM) -> Iterator[Session]:
    """`dspy-rag mcp` started by the SDK's stdio client as a desktop assistant starts it, for the module's tests;
    its stderr (the server's log) goes to folder/mcp.log."""
    command = StdioServerParameters(command=CLI, args=["mcp"], cwd=folder,
                                    env=user_environment(environment(folder, script)))
    with open(folder / "mcp.log", "w") as log, connected(stdio_client(command, errlog=log)) as session:
        yield session


@pytest.fixture()
def fake_lm(script: FakeLM, folder: Path, monkeypatch: pytest.MonkeyPatch) -> FakeLM:
    """The scripted LM with its faults reset, and `ask` in this process pointed at it and at the same index."""
    for name, value in environment(folder, script).items():
        monkeypatch.setenv(name, value)
    script.status = 200
    return script


def refusal(result: CallToolResult) -> str:
    """A tool error: one line of text, no traceback and no wrapper of the SDK's around it; returns the line."""
    assert result.is_error, result
    [content] = result.content
    assert "\n" not in content.text and "Traceback" not in content.text
    assert not content.text.startswith("Error executing tool"), content.text
    return content.text


def choices(schema: dict[str, Any]) -> list[str]:
    """The values a JSON schema's enum allows, also as one branch of an anyOf (an optional value)."""
    return next(branch["enum"] for branch in (schema, *schema.get("anyOf", ())) if "enum" in branch)


def test_the_research_tool_takes_the_http_servers_research_options(stdio: Session) -> None:
    from dspy_rag.server.bodies import ResearchBody

    tools = stdio.tools()
    assert set(tools) == {"research", "search", "list_sections"}
    offered = tools["research"].input_schema["properties"]
    body = ResearchBody.model_json_schema()["properties"]
    assert set(offered) == set(body) - {"stream"} and tools["research"].input_schema["required"] == ["question"]
    for option in ("pipeline", "policy", "web"):
        assert choices(offered[option]) == choices(body[option]) and len(choices(body[option])) >= 2
    assert tools["search"].input_schema["properties"]["strategy"]["enum"] == ["vector", "keyword", "hybrid"]


def test_list_sections_names_each_source_with_its_sections(stdio: Session, folder: Path) -> None:
    listed = stdio("list_sections")
    assert not listed.is_error, listed
    [source] = listed.structured_content["sources"]
    assert source["source"] == str(folder / "facts.md") and source["sections"] == ["facts"]
    assert source["chunks"] == listed.structured_content["chunks"] == 1
    assert json.loads(listed.content[0].text) == listed.structured_content  # for clients that read text only


@pytest.mark.parametrize("strategy", ["vector", "keyword", "hybrid"])
def test_search_finds_what_the_index_retriever_finds(stdio: Session, folder: Path, strategy: str) -> None:
    found = stdio("search", {"query": "Data Center revenue", "strategy": strategy})
    assert not found.is_error, found
    settings = scratch_config(folder).retrieval
    expected = Retriever(Index(scratch_config(folder)).require(), settings.top_k, settings.rrf_k).search(
        "Data Center revenue", strategy)
    passages = found.structured_content["passages"]
    assert [p["id"] for p in passages] == [p.id for p in expected] and len(passages) == 1
    assert passages[0]["source"] == str(folder / "facts.md") and passages[0]["section"] == "facts"
    assert passages[0]["text"] == FACTS.strip() and passages[0]["score"] == pytest.approx(expected[0].score)


def test_search_names_the_sections_it_searched(stdio: Session) -> None:
    within = stdio("search", {"query": "revenue", "section": "Facts"}).structured_content
    assert within["sections"] == ["facts"] and len(within["passages"]) == 1
    unknown = stdio("search", {"query": "revenue", "section": "Item 1A. Risk Factors"}).structured_content
    assert unknown["sections"] == [] and len(unknown["passages"]) == 1  # searched everything


def test_research_reports_each_step_as_progress_and_answers_with_asks_json(stdio: Session, fake_lm: FakeLM) -> None:
    progress: list[tuple[float, str | None]] = []
    answered = stdio("research", {"question": QUESTION}, progress)
    assert not answered.is_error, answered
    document = answered.structured_content
    assert document["short_answer"] == "$15.01 billion" and document["citations"]
    asked = invoke("ask", "--json", QUESTION)
    assert asked.returncode == 0, asked.stderr
    assert without_times(document) == without_times(json.loads(asked.stdout))
    # The notes are `ask`'s progress lines, in order, as the HTTP server streams them: "› kind text".
    done = [n for n, _ in progress]
    assert done == sorted(set(done))
    heard = [message for _, message in progress if not message.startswith("loading ")]
    assert [m.split()[0] for m in heard if m.split()[0] in ("plan", "step", "decision")] == ["plan", "step", "decision"]
    shown = [line for line in invoke("ask", QUESTION).stderr.splitlines()
             if not line.startswith(("› loading ", "› deep research over "))]
    assert "\n".join(f"› {message}" for message in heard).splitlines() == shown  # a note may be several lines


def test_the_baseline_answers_within_lower_budgets(stdio: Session, fake_lm: FakeLM) -> None:
    answered = stdio("research", {"question": QUESTION, "pipeline": "baseline", "budgets": {"max_lm_calls": 3}})
    assert not answered.is_error, answered
    document = answered.structured_content
    assert document["pipeline"] == "baseline" and document["trajectory"] is None
    assert document["short_answer"] == "$15.01 billion"


@pytest.mark.parametrize(("tool", "arguments", "says"), [
    ("research", {"question": ""}, "the question is empty; ask something"),
    ("research", {"question": " \t\x01\x1b[31m "}, "the question is empty"),
    ("research", {"question": "x" * 3000}, "the question is 3,000 characters; keep it under 2,000"),
    ("research", {}, "question: Field required"),
    ("research", {"question": 42}, "question: Input should be a valid string"),
    ("research", {"question": QUESTION, "pipeline": "fast"}, "pipeline: Input should be 'deep' or 'baseline'"),
    ("research", {"question": QUESTION, "artifact": "../../etc"}, "artifact: String should match pattern"),
    ("research", {"question": QUESTION, "web": "/etc/passwd"}, "web: Input should be 'off' or 'tavily'"),
    ("research", {"question": QUESTION, "budgets": {"max_steps": 99}}, "budgets.max_steps 99 is over this server's"),
    ("research", {"question": QUESTION, "budgets": {"steps": 1}}, "budgets.steps: Extra inputs are not permitted"),
    ("search", {"query": " "}, "the query is empty; search for something"),
    ("search", {"query": "revenue", "strategy": "fuzzy"}, "strategy: Input should be 'vector', 'keyword' or 'hybrid'"),
    ("search", {"query": "revenue", "limit": 0}, "limit: Input should be greater than or equal to 1"),
    ("answer", {"question": QUESTION}, "Unknown tool: answer"),
])
def test_bad_input_is_a_tool_error_of_one_line(stdio: Session, tool: str, arguments: dict[str, Any], says: str) -> None:
    assert says in refusal(stdio(tool, arguments))


def test_a_failing_model_is_a_tool_error_that_masks_the_key(stdio: Session, fake_lm: FakeLM, folder: Path) -> None:
    fake_lm.status, fake_lm.error = 401, f"Incorrect API key provided: {SECRET}"
    error = refusal(stdio("research", {"question": QUESTION}))
    assert "check the model name, its server (lm.api_base) and its API key" in error
    assert SECRET not in error and "***" in error
    fake_lm.status = 200
    assert not stdio("research", {"question": QUESTION}).is_error  # the server goes on
    log = (folder / "mcp.log").read_text()
    assert "Incorrect API key provided: ***" in log and SECRET not in log and "Traceback" not in log


def test_every_tool_without_an_index_says_to_ingest_first(tmp_path: Path, script: FakeLM) -> None:
    from dspy_rag.server.mcp_tools import create_mcp

    settings = load_config(overrides={"index.path": tmp_path / "empty"}, environ=script.env)
    with connected(create_mcp(settings)) as call:
        for tool, arguments in (("list_sections", {}), ("search", {"query": "revenue"}),
                                ("research", {"question": QUESTION})):
            error = refusal(call(tool, arguments))
            assert error.startswith(f"no documents indexed in {tmp_path / 'empty'}; run `dspy-rag ingest FILE` first")


def test_streamable_http_on_127_0_0_1_with_the_token(folder: Path, script: FakeLM) -> None:
    import httpx2
    import uvicorn
    from mcp.client.streamable_http import streamable_http_client

    from dspy_rag.server.mcp_tools import http_app

    port = free_port()
    settings = load_config(overrides={"serve.mcp_port": port}, environ={**environment(folder, script),
                                                                          "DSPY_RAG_SERVE_TOKEN": TOKEN})
    server = uvicorn.Server(uvicorn.Config(http_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
            time.sleep(0.05)
        refused = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert refused.status_code == 401 and "token" in refused.json()["error"]
        guarded = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"}, timeout=60)
        with connected(streamable_http_client(url, http_client=guarded)) as call:
            listed = call("list_sections")
            found = call("search", {"query": "Gaming revenue", "strategy": "keyword"})
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    assert listed.structured_content["sources"][0]["sections"] == ["facts"]
    assert found.structured_content["passages"][0]["section"] == "facts"
    assert TOKEN not in json.dumps(listed.structured_content) + json.dumps(found.structured_content)


@pytest.mark.slow
def test_the_real_local_model_researches_the_readme_question_over_stdio(tenk_index: Any) -> None:
    command = StdioServerParameters(command=CLI, args=["mcp", "--index", str(tenk_index.root)],
                                    env=user_environment())
    progress: list[tuple[float, str | None]] = []
    with connected(command, timeout=900) as call:  # a deep run on the 0.5B: minutes on a busy machine
        answered = call("research", {"question": "What was NVIDIA's Data Center revenue in fiscal year 2023?"},
                        progress)
    assert not answered.is_error, answered
    assert "15.01" in answered.structured_content["answer"]
    assert {"plan", "step", "decision"} <= {message.split()[0] for _, message in progress}
