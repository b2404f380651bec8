"""End to end on the real parts: the 10-K through `dspy-rag ingest`, then `ask` on the local 0.5B model."""

import json
from pathlib import Path

import pytest

from conftest import free_port
from conftest import run_cli as run
from dspy_rag.pipelines.trajectory import TRAJECTORY_VERSION

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tenk_folder(tmp_path_factory: pytest.TempPathFactory, tenk_filing: Path) -> Path:
    folder = tmp_path_factory.mktemp("e2e")
    ingest = run("ingest", str(tenk_filing), "--json", cwd=folder)
    assert ingest.returncode == 0, ingest.stderr
    report = json.loads(ingest.stdout)
    sections = report["sections"][str(tenk_filing.resolve())]
    for item in ("Item 1.", "Item 1A.", "Item 2.", "Item 7.", "Item 7A.", "Item 8."):
        assert any(s.startswith(item) for s in sections), item
    return folder


def test_ask_the_baseline_on_the_10k(tenk_folder: Path) -> None:
    ask = run("ask", "--pipeline", "baseline", "--json",
              "What was NVIDIA's Data Center revenue in fiscal year 2023?", cwd=tenk_folder)
    assert ask.returncode == 0, ask.stderr
    result = json.loads(ask.stdout)
    assert "15.01 billion" in result["answer"]
    assert any(c["section"].startswith("Item 7.") for c in result["citations"])
    assert "[Item 7." in result["answer"]
    retrieved = {r["id"] for r in result["retrieved"]}
    assert {c["chunk_id"] for c in result["citations"]} <= retrieved
    assert result["lm_calls"] == 1 and result["prompt_tokens"] > 500 and result["completion_tokens"] > 5


def test_ask_with_the_offline_web_snapshot(tenk_folder: Path, shared_data: Path, tenk_filing: Path) -> None:
    question = ("Identify NVIDIA's competition risks, then explain how AMD's MI300X MLPerf inference results "
                "bear on one of them.")
    ask = run("ask", "--pipeline", "baseline", "--json", "--web", str(shared_data / "web-snapshot"), question,
              cwd=tenk_folder)
    assert ask.returncode == 0, ask.stderr
    result = json.loads(ask.stdout)
    sources = {r["source"] for r in result["retrieved"]}
    assert result["web"] == {"provider": "snapshot", "error": None}
    assert any("rocm-blog-2024-08-28" in s for s in sources) and str(tenk_filing.resolve()) in sources
    assert {c["chunk_id"] for c in result["citations"]} <= {r["id"] for r in result["retrieved"]}


def test_a_failing_web_provider_is_reported_and_the_answer_comes_from_the_documents(tenk_folder: Path,
                                                                                     tenk_filing: Path) -> None:
    sentinel = "tvly-SENTINEL-e2e-5f4e3d"
    env = {"TAVILY_API_KEY": sentinel, "DSPY_RAG_WEB_TAVILY_BASE_URL": f"http://127.0.0.1:{free_port()}"}
    ask = run("ask", "--pipeline", "baseline", "--json", "--web", "tavily",
              "What was NVIDIA's Gaming revenue in fiscal year 2023?", cwd=tenk_folder, env=env)
    assert ask.returncode == 0, ask.stderr
    result = json.loads(ask.stdout)
    assert result["web"]["provider"] == "tavily" and "cannot reach Tavily" in result["web"]["error"]
    assert result["answer"] and all(r["source"] == str(tenk_filing.resolve()) for r in result["retrieved"])
    assert sentinel not in ask.stdout + ask.stderr


def test_ask_shows_its_steps_and_sources(tmp_path: Path) -> None:
    (tmp_path / "facts.md").write_text(
        "# Offices\nThe Oslo office of Fjordware opened in 2019 and employs 42 engineers.\n\n"
        "# Products\nFjordware sells the SnowPlow 3000 de-icing robot.\n")
    assert run("ingest", "facts.md", cwd=tmp_path).returncode == 0
    ask = run("ask", "How many engineers work at the Oslo office?", cwd=tmp_path,
              env={"DSPY_RAG_BUDGETS_WALL_CLOCK_SECONDS": "1800"})
    assert ask.returncode == 0, ask.stderr
    for shown in ("loading local/qwen2.5-coder-0.5b", "artifact deep-qwen2.5-coder-0.5b", "deep research", "plan",
                  "query", "strategy", "sources", "context", "finding", "decision"):
        assert f"› {shown}" in ask.stderr, shown  # the shipped artifact answers unless told otherwise
    assert "42" in ask.stdout and "[Offices]" in ask.stdout and "Sources" in ask.stdout


def test_deep_ask_on_the_10k_records_a_complete_trajectory(tenk_folder: Path) -> None:
    # A generous clock: a busy CI machine must not turn this into a test of the time budget.
    ask = run("ask", "--json", "--trace", "trace.json", "What was NVIDIA's Data Center revenue in fiscal year 2023?",
              cwd=tenk_folder, env={"DSPY_RAG_BUDGETS_WALL_CLOCK_SECONDS": "1800"})
    assert ask.returncode == 0, ask.stderr
    result = json.loads(ask.stdout)
    trajectory = result["trajectory"]
    assert json.loads((tenk_folder / "trace.json").read_text()) == trajectory
    assert trajectory["version"] == TRAJECTORY_VERSION and trajectory["steps"] and trajectory["plans"]
    # the shipped artifact's learned policy decides: no policy or supervisor call, the plan, a rewrite, the answer
    assert trajectory["policy"] == "learned" and result["lm_calls"] == trajectory["lm_calls"] >= 3
    assert {"policy", "supervise"}.isdisjoint(c["module"] for c in trajectory["calls"])
    searched = [s for s in trajectory["steps"] if s["strategy"] is not None]
    assert searched and all(s["strategy_reason"].startswith("learned: predicted evidence recall") for s in searched)
    assert result["tokens"] == trajectory["tokens"] and trajectory["lm_seconds"] <= result["seconds"]
    step = trajectory["steps"][0]
    assert step["query"] and step["finding"] and step["decision"] in ("CONTINUE", "REVISE", "FINISH")
    assert any(p["section"].startswith("Item 7.") for s in trajectory["steps"] for p in s["retrieved"])
    read = {p["id"] for p in trajectory["floor"]} | {p["id"] for s in trajectory["steps"] for p in s["reranked"]}
    assert {c["chunk_id"] for c in result["citations"]} <= read  # cited from the floor or a step's passages
    assert {p["id"] for p in trajectory["floor"]} <= {r["id"] for r in result["retrieved"]}  # the evidence floor
    assert "15.01 billion" in result["short_answer"]  # the README's question, answered from Item 7
    # Beyond that, what must hold is that nothing unsupported passes silently: every sentence is either backed
    # by a cited passage or flagged.
    assert result["answer"] and result["flagged"] == trajectory["flagged"]
    squashed = " ".join(result["answer"].split())
    assert all(" ".join(f["sentence"].split())[:40] in squashed for f in result["flagged"])
    assert trajectory["citation_validity"] is None or 0.0 <= trajectory["citation_validity"] <= 1.0


def test_ask_with_the_lm_policy_asks_the_policy_and_the_supervisor_lm(tenk_folder: Path) -> None:
    ask = run("ask", "--json", "--policy", "llm", "What was NVIDIA's Data Center revenue in fiscal year 2023?",
              cwd=tenk_folder, env={"DSPY_RAG_BUDGETS_WALL_CLOCK_SECONDS": "1800"})
    assert ask.returncode == 0, ask.stderr
    result = json.loads(ask.stdout)
    modules = [c["module"] for c in result["trajectory"]["calls"]]
    assert result["trajectory"]["policy"] == "llm" and {"policy", "supervise"} <= set(modules)
    searched = [s for s in result["trajectory"]["steps"] if s["strategy"] is not None]
    assert searched and not any(s["strategy_reason"].startswith("learned:") for s in searched)
    assert "15.01 billion" in result["short_answer"]
