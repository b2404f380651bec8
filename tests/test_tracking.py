"""MLflow beside the ledger: a scripted compile and eval log their settings and scores to a real MLflow
database; a missing or failing MLflow costs a warning, never the run or its ledger line; no secret is sent."""

import sqlite3
import sys
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM

from conftest import REPLIES, scratch_config
from dspy_rag import models
from dspy_rag.config import Config
from dspy_rag.ledger import read
from dspy_rag.optimizers import compile as compiling
from dspy_rag.reporter import Quiet

mlflow = pytest.importorskip("mlflow")
SECRET = "sk-test-0123456789abcdef"


@pytest.fixture()
def scripted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DSPY_RAG_CACHE", str(tmp_path / "cache"))

    def build_lm(_config: Any) -> DummyLM:
        lm = DummyLM(REPLIES, adapter=dspy.JSONAdapter())
        lm.kwargs["api_key"] = SECRET  # as a served model's LM carries it
        return lm

    monkeypatch.setattr(models, "build_lm", build_lm)


class Said(Quiet):
    """A reporter that keeps the progress lines it is told."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, message: str, kind: str | None = None) -> None:
        self.lines.append(message)


def compile_with(tmp_path: Path, trainset: Path, tracking_uri: str | None) -> tuple[Any, list[str]]:
    config: Config = scratch_config(tmp_path, **{"artifacts.path": tmp_path / "artifacts", "retrieval.reranker": "none",
                                                 "mlflow.tracking_uri": tracking_uri, "lm.api_key": SECRET})
    said = Said()
    request = compiling.CompileRequest(str(trainset), "bootstrap", name="tracked")
    return compiling.compile_program(request, config, said), said.lines


def test_a_compile_logs_its_settings_and_scores_to_mlflow_without_secrets(trainset: Path, tmp_path: Path,
                                                                          scripted: None) -> None:
    database = tmp_path / "mlflow.db"
    manifest, said = compile_with(tmp_path, trainset, f"sqlite:///{database}")
    assert not [line for line in said if "MLflow" in line]
    mlflow.set_tracking_uri(f"sqlite:///{database}")
    [run] = [r for r in mlflow.search_runs(experiment_names=["dspy-rag"], output_format="list")
             if r.info.run_name == "tracked"]
    assert run.info.status == "FINISHED"
    assert run.data.params["optimizer"] == "bootstrap" and run.data.params["trainset"] == manifest.trainset
    assert run.data.metrics["dev_before"] == manifest.dev_before and run.data.metrics["dev_after"] == manifest.dev_after
    assert run.data.metrics["lm_calls"] == manifest.lm_calls
    stored = [database, *(p for p in (tmp_path / "mlruns").rglob("*") if p.is_file())]
    assert all(SECRET.encode() not in path.read_bytes() for path in stored)
    with sqlite3.connect(database) as db:
        assert not db.execute("select count(*) from trace_info").fetchone()[0]  # no LM call traces are sent


def test_a_failing_mlflow_costs_one_warning_not_the_compile(trainset: Path, tmp_path: Path, scripted: None) -> None:
    manifest, said = compile_with(tmp_path, trainset, "nosuchscheme://nowhere")
    assert [line for line in said if "MLflow" in line] == [
        next(line for line in said if line.startswith("MLflow at nosuchscheme://nowhere failed"))]
    assert [e.artifact for e in read(tmp_path / "artifacts" / "ledger.jsonl")] == [manifest.name]


def test_mlflow_configured_but_not_installed_says_how_to_install_it(trainset: Path, tmp_path: Path, scripted: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow now raises ImportError
    manifest, said = compile_with(tmp_path, trainset, f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert any("pip install 'dspy-rag[mlflow]'" in line for line in said)
    assert (tmp_path / "artifacts" / manifest.name / "manifest.json").exists()
