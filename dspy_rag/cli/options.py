"""The options several commands share, and how a command prints its one JSON document."""

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from dspy_rag.config import Config, load_config

ConfigOption = Annotated[Path | None, typer.Option("--config", help="YAML configuration (default: ./dspy-rag.yaml)")]
# Text, not Path: typer would read "" as ".", the working folder, where the configuration refuses an empty name.
IndexOption = Annotated[str | None, typer.Option("--index", help="index folder (default: index.path)")]
ModelOption = Annotated[str | None, typer.Option("--model", help="local/qwen2.5-coder-0.5b, or a LiteLLM model")]
ArtifactOption = Annotated[str | None, typer.Option(
    "--artifact", help="deep: a compiled artifact (name or folder), auto (the default for the model) or none")]
JsonOption = Annotated[bool, typer.Option("--json", help="print one machine-readable JSON document")]
# pipelines.programs.PolicyChoice, spelled here: --help imports no DSPy
Policy = Literal["auto", "llm", "plan", "learned"]


def config_of(config: Path | None, **flags: Any) -> Config:
    """The configuration file (or ./dspy-rag.yaml) under the environment, under the flags that were given."""
    return load_config(config, overrides=flags)


def print_json(document: Any) -> None:
    """The command's whole output on stdout: one JSON document (progress goes to stderr)."""
    print(json.dumps(document, indent=1, default=str))
