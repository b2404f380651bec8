"""The `dspy-rag` command line: the only place that imports typer and rich. Its commands live by what they are
for (use, learn, measure, inspect); the floors below report progress through `dspy_rag.reporter` and return
data, which the commands print."""

import os
from typing import Annotated

import typer
from typer import rich_utils
from typer.core import TyperOption

from dspy_rag import __version__
from dspy_rag.cli.bench import bench_app
from dspy_rag.cli.inspection import history_command, list_models, show_config, trainsets_command
from dspy_rag.cli.learn import compile_command, distill_policy_command, train_reranker_command
from dspy_rag.cli.mcp import mcp_command
from dspy_rag.cli.measure import eval_command
from dspy_rag.cli.runs import runs_app
from dspy_rag.cli.serve import serve
from dspy_rag.cli.use import ask, ingest
from dspy_rag.errors import UserError, exit_with_error

INTERRUPTED = 130  # the shell's code for a command stopped by Ctrl-C
USE, LEARN, MEASURE, INSPECT = "Use", "Learn", "Measure", "Inspect"

app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False,
                  help="A deep-thinking research assistant over your documents and the web.")


def _version(shown: bool) -> None:
    if shown:
        print(f"dspy-rag {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                   help="print the version and exit")] = False) -> None:
    """A deep-thinking research assistant over your documents and the web."""


# In --help order: the panels appear as their first command does.
app.command("ingest", rich_help_panel=USE)(ingest)
app.command("ask", rich_help_panel=USE)(ask)
app.command("serve", rich_help_panel=USE)(serve)
app.command("mcp", rich_help_panel=USE)(mcp_command)
app.command("compile", rich_help_panel=LEARN)(compile_command)
app.command("distill-policy", rich_help_panel=LEARN)(distill_policy_command)
app.command("train-reranker", rich_help_panel=LEARN)(train_reranker_command)
app.command("eval", rich_help_panel=MEASURE)(eval_command)
app.add_typer(bench_app, name="bench", rich_help_panel=MEASURE)
app.command("history", rich_help_panel=INSPECT)(history_command)
app.add_typer(runs_app, name="runs", rich_help_panel=INSPECT)
app.command("trainsets", rich_help_panel=INSPECT)(trainsets_command)
app.command("models", rich_help_panel=INSPECT)(list_models)
app.command("config", rich_help_panel=INSPECT)(show_config)

_value_type = TyperOption.display_type_rich


def _no_value_for_a_flag(option: TyperOption, ctx: typer.Context) -> str | None:
    """typer's help shows a flag as `--json <bool>`, as if it took a value that parsing then refuses
    (`--json=false`); a flag takes none, so its help shows none."""
    return None if option.is_flag else _value_type(option, ctx)


TyperOption.display_type_rich = _no_value_for_a_flag

_boxed_error = rich_utils.rich_format_error


def _one_line_error(error: Exception) -> None:
    """typer draws a usage mistake in a box under the command's usage; the tool says every error in one line,
    with where to look. A command given alone still shows its help."""
    if type(error).__name__ == "NoArgsIsHelpError":
        _boxed_error(error)
        return
    context = getattr(error, "ctx", None)
    where = f"`{context.command_path} --help`" if context is not None else "the command's --help"
    exit_with_error(f"{error.format_message().rstrip('.')}; see {where}", getattr(error, "exit_code", 2))


rich_utils.rich_format_error = _one_line_error


def _quiet_libraries() -> None:
    # Third-party progress bars and warnings would bury our own one-line messages.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    # DSPy otherwise fetches LiteLLM's model price list on first use: a network call, 5 s lost offline.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    for name in ("dspy", "LiteLLM", "chromadb", "sentence_transformers", "transformers", "httpx"):
        logging.getLogger(name).setLevel(logging.ERROR)


def main() -> None:
    _quiet_libraries()
    try:
        # typer reports usage mistakes itself (in one line: _one_line_error; exit 2) and turns Ctrl-C into a
        # silent exit 130; named, so messages say `dspy-rag` however it was started (python -m dspy_rag ...)
        app(prog_name="dspy-rag")
    except SystemExit as exc:
        if exc.code == INTERRUPTED:
            exit_with_error("interrupted; nothing unfinished was saved (an ingest keeps the files it completed)",
                            INTERRUPTED)
        raise
    except UserError as exc:
        exit_with_error(str(exc), 2)
    except Exception as exc:  # the last line of defence: one line, never a traceback, unless asked for
        if os.environ.get("DSPY_RAG_DEBUG"):
            raise
        first_line = str(exc).splitlines()[0] if str(exc).strip() else ""
        exit_with_error(f"unexpected {type(exc).__name__}: {first_line} (set DSPY_RAG_DEBUG=1 for the traceback)", 1)
