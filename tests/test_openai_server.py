"""The LiteLLM path against a real OpenAI-compatible server: llama.cpp's own, serving the local model."""

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import free_port, run_cli, running_server
from dspy_rag.models import ensure_local_model, lookup

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    port = free_port()
    gguf = ensure_local_model(lookup("local/qwen2.5-coder-0.5b"))
    base = f"http://127.0.0.1:{port}/v1"
    with running_server([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "qwen",
                         "--host", "127.0.0.1", "--port", str(port), "--n_threads", "2", "--n_ctx", "4096"],
                        f"{base}/models"):
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
