"""One real compile on the local 0.5B model, small enough for CI: the CLI bootstraps from the 10-K set's first
train questions, scores one dev question before and after, and leaves an artifact that loads and a ledger line."""

import json
import os
from pathlib import Path

import pytest

from conftest import run_cli as run
from dspy_rag.files import cache_root

pytestmark = pytest.mark.slow


@pytest.mark.usefixtures("shared_data")  # the 10-K set indexes the filing
def test_a_real_compile_writes_an_artifact_that_ask_can_use(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(cache_root() / "models")  # the assembled model, but no cached dev scores
    env = {"DSPY_RAG_CACHE": str(cache), "DSPY_RAG_ARTIFACTS_PATH": str(tmp_path / "artifacts"),
           "DSPY_RAG_LM_THREADS": os.environ.get("DSPY_RAG_LM_THREADS", "")}
    env = {k: v for k, v in env.items() if v}
    compiled = run("compile", "--trainset", "nvidia-10k", "--optimizer", "bootstrap", "--train-limit", "2",
                   "--dev-limit", "1", "--threshold", "0", "--name", "ci", cwd=tmp_path, env=env, timeout=1800)
    assert compiled.returncode == 0, compiled.stderr
    assert "dev before (1): run 1" in compiled.stderr and "dev after (1): run 1" in compiled.stderr
    folder = tmp_path / "artifacts" / "ci"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["model"] == "local/qwen2.5-coder-0.5b" and manifest["optimizer"] == "bootstrap"
    assert manifest["lm_calls"] >= 3 * 5 and manifest["tokens"] > 1000  # three runs of at least five calls
    state = json.loads((folder / "program.json").read_text())
    # threshold 0 accepts the first train run, so every module that ran carries one bootstrapped demo from it;
    # the distiller and the reflection are off by default and never ran
    ran = ("planner.predict", "researcher.rewriter.predict", "synthesizer.short_answer.predict")
    assert all(len(state[m]["demos"]) >= 1 for m in ran)
    assert not state["researcher.distiller.predict"]["demos"] and not state["researcher.reflection.predict"]["demos"]
    trajectories = (folder / "trajectories.jsonl").read_text().splitlines()
    assert len(trajectories) >= 1 and json.loads(trajectories[0])["trajectory"]["calls"]
    ledger = [json.loads(line) for line in (tmp_path / "artifacts" / "ledger.jsonl").read_text().splitlines()]
    assert [(e["kind"], e["artifact"], e["score_before"]) for e in ledger] == [
        ("compile", "ci", manifest["dev_before"])]
    history = run("history", "--json", cwd=tmp_path, env=env)
    assert history.returncode == 0 and json.loads(history.stdout)["lineages"][0]["rows"][0]["artifact"] == "ci"
