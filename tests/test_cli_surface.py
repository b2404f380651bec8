"""The command line's surface: commands grouped in --help, and shell completion."""

import re
import subprocess
from pathlib import Path

from typer.main import get_group

from conftest import CLI, run_cli, user_environment
from dspy_rag.cli import app


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

