"""The LiteLLM path against a real OpenAI-compatible server: llama.cpp's own, serving the local model."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import free_port, llama_cpp_server, run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with llama_cpp_server() as base:
        yield base


def test_ask_through_an_openai_compatible_api_base(server: str, tmp_path: Path) -> None:
    env = {"DSPY_RAG_LM_API_BASE": server}
    (tmp_path / "facts.md").write_text("# Offices\nThe Oslo office of Fjordware employs 42 engineers.\n\n"
                                       "# Products\nFjordware sells the SnowPlow 3000 de-icing robot.\n")
    ingest = run_cli("ingest", "facts.md", cwd=tmp_path, env=env)
    assert ingest.returncode == 0, ingest.stderr
    ask = run_cli("ask", "--pipeline", "baseline", "--model", "openai/qwen", "--json", "How many engineers work in Oslo?",
                  cwd=tmp_path, env=env)
    assert ask.returncode == 0, ask.stderr
    result = json.loads(ask.stdout)
    assert result["model"] == "openai/qwen" and result["lm_calls"] == 1 and result["prompt_tokens"] > 50
    # Correctness is the model's business; this checks the wiring: a real short answer came back over HTTP in
    # plain text (no server-side schema needed), parsed, with citations to retrieved chunks.
    assert result["short_answer"].strip() and result["answer"].strip() and result["completion_tokens"] >= 1
    assert {c["chunk_id"] for c in result["citations"]} <= {r["id"] for r in result["retrieved"]}


def test_a_server_that_is_down_is_a_one_line_error(tmp_path: Path) -> None:
    env = {"DSPY_RAG_LM_API_BASE": f"http://127.0.0.1:{free_port()}/v1"}
    (tmp_path / "facts.md").write_text("# Offices\nThe Oslo office employs 42 engineers.\n")
    assert run_cli("ingest", "facts.md", cwd=tmp_path, env=env).returncode == 0
    ask = run_cli("ask", "--model", "openai/qwen", "How many engineers?", cwd=tmp_path, env=env)
    assert ask.returncode == 2, ask.stderr
    lines = ask.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "lm.api_base" in lines[-1] and "Traceback" not in ask.stderr
