"""`dspy-rag eval`: programs side by side on a trainset's dev questions (dspy_rag.evals.evaluate), as a table."""

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from dspy_rag.cli.console import STDERR, out
from dspy_rag.cli.options import ConfigOption, JsonOption, config_of, print_json
from dspy_rag.evals.evaluate import ABLATIONS, run_eval, table


def eval_command(
    questions: Annotated[list[str], typer.Option(help="a trainset name or YAML definition (its dev split is asked); "
                                                 "repeat, or separate with commas, to pool several sets")],
    pipeline: Annotated[list[str] | None, typer.Option(help="plain (the plainest RAG, a yardstick), baseline and/or "
                                                       "deep (repeat; default deep)")] = None,
    artifact: Annotated[list[str] | None, typer.Option(help="deep: artifact name/folder or none (repeat)")] = None,
    model: Annotated[list[str] | None, typer.Option(help="model (repeat; default the configured one)")] = None,
    policy: Annotated[list[str] | None, typer.Option(help="deep: llm, plan or learned (the artifact's distilled "
                                                     "policy.json, which ask uses by default) (repeat; default "
                                                     "llm)")] = None,
    without: Annotated[list[str] | None, typer.Option(help="deep: also run it with this guard or role off, as a column "
                                                      "of its own (repeat): " + ", ".join(ABLATIONS))] = None,
    with_: Annotated[list[str] | None, typer.Option("--with", help="deep: also run it with this guard or role on, as "
                                                    "a column of its own (repeat): " + ", ".join(ABLATIONS))] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="first N dev questions of each set")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="folder for results JSON, rows and report "
                                                          "(default: evals/results/eval-SET here)")] = None,
    judge: Annotated[str | None, typer.Option(help="a model that judges ragas' LLM metrics (faithfulness, answer "
                                              "correctness, context precision and recall)")] = None,
    take: Annotated[int, typer.Option(min=1, help="2, 3 ...: run every question again as a repeat measurement, "
                                      "kept apart in the run store (it resumes, and is reused as that take), for "
                                      "the run-to-run noise; write it to its own --out")] = 1,
    planner_model: Annotated[list[str] | None, typer.Option(
        help="deep: a model of its own for the planner, or none for the column's model (repeat; default "
             "lm.planner_model)")] = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Evaluate pipelines, artifacts and models side by side on a trainset's dev questions."""
    report = run_eval(config_of(config), questions, pipeline, artifact, model, policy, without, limit, out_dir, judge,
                      STDERR, with_, take, planner_model)
    if as_json:
        print_json(report)
        return
    show(report["title"], report["columns"])
    for part in report.get("sets", {}).values():
        show(part["title"], part["columns"])


def show(title: str, columns: dict[str, dict[str, Any]]) -> None:
    headers, rows = table(columns)
    shown = Table(title=title)
    for header in headers:
        shown.add_column(header)
    for cells in rows:
        shown.add_row(*cells)
    out.print(shown)
