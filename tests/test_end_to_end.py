"""End to end on the real parts: the 10-K through `dspy-rag ingest`, then `ask` on the local 0.5B model."""

import json
from pathlib import Path

import pytest

from conftest import TENK
from conftest import run_cli as run

pytestmark = pytest.mark.slow


def test_ingest_the_10k_then_ask_the_baseline(tmp_path: Path) -> None:
    ingest = run("ingest", str(TENK), "--json", cwd=tmp_path)
    assert ingest.returncode == 0, ingest.stderr
    report = json.loads(ingest.stdout)
    sections = report["sections"][str(TENK.resolve())]
    for item in ("Item 1.", "Item 1A.", "Item 2.", "Item 7.", "Item 7A.", "Item 8."):
        assert any(s.startswith(item) for s in sections), item

    ask = run("ask", "--pipeline", "baseline", "--json",
              "What was NVIDIA's Data Center revenue in fiscal year 2023?", cwd=tmp_path)
    assert ask.returncode == 0, ask.stderr
    result = json.loads(ask.stdout)
    assert "15.01 billion" in result["answer"]
    assert any(c["section"].startswith("Item 7.") for c in result["citations"])
    assert "[Item 7." in result["answer"]
    retrieved = {r["id"] for r in result["retrieved"]}
    assert {c["chunk_id"] for c in result["citations"]} <= retrieved
    assert result["lm_calls"] == 1 and result["prompt_tokens"] > 500 and result["completion_tokens"] > 5


def test_ask_shows_its_steps_and_sources(tmp_path: Path) -> None:
    (tmp_path / "facts.md").write_text(
        "# Offices\nThe Oslo office of Fjordware opened in 2019 and employs 42 engineers.\n\n"
        "# Products\nFjordware sells the SnowPlow 3000 de-icing robot.\n")
    assert run("ingest", "facts.md", cwd=tmp_path).returncode == 0
    ask = run("ask", "How many engineers work at the Oslo office?", cwd=tmp_path)
    assert ask.returncode == 0, ask.stderr
    assert "hybrid retrieval" in ask.stderr and "loading local/qwen2.5-coder-0.5b" in ask.stderr
    assert "42" in ask.stdout and "[Offices]" in ask.stdout and "Sources" in ask.stdout
