"""The command line's surface: commands grouped in --help, shell completion, flags whose help matches their
parsing, and `--json` that prints one JSON document on stdout and nothing else."""

import json
import re
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.main import get_group
from typer.testing import CliRunner

from conftest import CLI, run_cli, user_environment
from dspy_rag.cli import app

SENTINEL = "tvly-SENTINEL-0a1b2c3d4e5f"


def test_help_groups_the_commands_with_ingest_and_ask_first(tmp_path: Path) -> None:
    shown = run_cli("--help", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    panels = re.findall(r"^╭─ (\w+) ─", shown.stdout, re.MULTILINE)
    commands = re.findall(r"^│ ([a-z][\w-]+)\s{2,}", shown.stdout, re.MULTILINE)
    assert panels == ["Options", "Use", "Learn", "Measure", "Inspect"]
    assert commands[:2] == ["ingest", "ask"]
    assert sorted(commands) == sorted(get_group(app).commands)


def test_show_completion_prints_a_shell_script(tmp_path: Path) -> None:
    # typer finds the shell among the process's parents: run the command from bash, as a user would (`; exit`
    # keeps bash from replacing itself with the command).
    shown = subprocess.run(["bash", "-c", '"$0" --show-completion bash; exit', CLI], cwd=tmp_path,
                           env=user_environment(), capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "_DSPY_RAG_COMPLETE=complete_bash" in shown.stdout and "complete -o default -F" in shown.stdout


def every_command_path() -> list[list[str]]:
    """The words that name each command, e.g. ["bench", "retrieval"]; [] is the top level."""
    paths: list[list[str]] = []

    def walk(command: Any, path: list[str]) -> None:
        paths.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(get_group(app), [])
    return paths


@pytest.mark.parametrize("path", every_command_path(), ids=lambda path: " ".join(path) or "dspy-rag")
def test_no_flag_shows_a_value_in_help(path: list[str]) -> None:
    shown = CliRunner().invoke(app, [*path, "--help"])
    assert shown.exit_code == 0, shown.output
    assert "--help" in shown.stdout and "<bool>" not in shown.stdout


def test_a_flag_parses_as_its_help_shows_it(tmp_path: Path) -> None:
    shown = run_cli("config", "--help", cwd=tmp_path)
    [row] = [line for line in shown.stdout.splitlines() if "--json" in line]
    assert row.split("--json")[1].split()[:2] == ["print", "one"]  # no value between the flag and its help
    refused = run_cli("config", "--json=false", cwd=tmp_path)
    assert refused.returncode == 2 and "does not take a value" in refused.stderr
    assert run_cli("config", "--json", cwd=tmp_path).returncode == 0


def test_config_json_is_the_printed_configuration(tmp_path: Path) -> None:
    env = {"TAVILY_API_KEY": SENTINEL}
    as_json = run_cli("config", "--json", "--index", "flag-index", cwd=tmp_path, env=env)
    as_yaml = run_cli("config", "--index", "flag-index", cwd=tmp_path, env=env)
    assert as_json.returncode == 0 and as_yaml.returncode == 0, as_json.stderr + as_yaml.stderr
    document = json.loads(as_json.stdout)  # the whole of stdout is one document
    assert document == yaml.safe_load(as_yaml.stdout)
    assert document["index"]["path"] == "flag-index" and SENTINEL not in as_json.stdout + as_json.stderr


def test_compile_dry_run_json_is_the_estimate(tmp_path: Path) -> None:
    shown = run_cli("compile", "--trainset", "nvidia-10k", "--optimizer", "labeled", "--dev-limit", "2",
                    "--dry-run", "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    estimate = json.loads(shown.stdout)
    assert (estimate["optimizer"], estimate["trainset"], estimate["dev"]) == ("labeled", "nvidia-10k", 2)
    assert estimate["program_runs"] >= 2 * estimate["dev"] and estimate["lm_calls"] > estimate["program_runs"]


def test_train_reranker_json_is_the_training_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dspy_rag.optimizers import train_reranker as training

    (tmp_path / "qs.jsonl").write_text(json.dumps({"id": "q1", "question": "Who?", "answer": "A"}) + "\n")
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"id": "p1", "text": "A did it."}) + "\n")
    (tmp_path / "dspy-rag.yaml").write_text(f"artifacts: {{path: {tmp_path / 'artifacts'}}}\n")
    summary = training.TrainingSummary("minilm", "cross-encoder", ["jsonl:qs.jsonl"], 1, 1, 3, 1, [], 1, 2e-5,
                                       "bce", [0.5], 1.0, "abc")

    def trained(datasets: list[Any], base: Path, out: Path, held_out: float, epochs: int, progress: Any) -> Any:
        assert [(name, len(questions), len(passages)) for name, questions, passages in datasets] == [
            ("jsonl:qs.jsonl", 1, 1)]
        progress(1, 1, 0.5)
        return summary

    monkeypatch.setattr(training, "train_reranker", trained)  # the command's path, not the training's
    shown = CliRunner().invoke(app, ["train-reranker", "--questions", str(tmp_path / "qs.jsonl"), "--corpus",
                                     str(tmp_path / "corpus.jsonl"), "--config", str(tmp_path / "dspy-rag.yaml"),
                                     "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout) == {"folder": str(tmp_path / "artifacts" / "rerankers" / "minilm"),
                                        **asdict(summary)}
