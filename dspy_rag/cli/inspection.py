"""The commands that show what is there: the configuration, the local models, the trainsets, the ledger's
history."""

from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich import box
from rich.table import Table

from dspy_rag.cli.console import err, out, print_whole, styled
from dspy_rag.cli.options import ConfigOption, IndexOption, JsonOption, ModelOption, config_of, print_json


def show_config(config: ConfigOption = None, index: IndexOption = None, model: ModelOption = None,
                as_json: JsonOption = False) -> None:
    """Print the effective configuration (file < DSPY_RAG_* environment < flags), secrets masked."""
    effective = config_of(config, **{"index.path": index, "lm.model": model}).masked()
    if as_json:
        print_json(effective)
        return
    out.print(yaml.safe_dump(effective, sort_keys=False).rstrip())


def list_models(
    prepare: Annotated[str | None, typer.Option("--prepare", help="assemble and verify this local model now")] = None,
    as_json: JsonOption = False,
) -> None:
    """List the local models: installed packages, assembled and verified, and where."""
    from dspy_rag.models import LOCAL_MODELS, ensure_local_model, is_ready, lookup, model_file

    if prepare:
        model = lookup(prepare)
        err.print(f"assembling {model.model_string} ({model.size / 1e9:.2f} GB) and checking its sha256 …")
        err.print(f"ready: {ensure_local_model(model)}")
    rows = [
        {"model": m.model_string, "size_bytes": m.size, "installed": m.installed(), "ready": is_ready(m),
         "path": str(model_file(m)), "install": m.install_hint}
        for m in LOCAL_MODELS.values()
    ]
    if as_json:
        print_json(rows)
        return
    for row in rows:
        if row["ready"]:
            state = f"ready      {row['path']}"
        elif row["installed"]:
            state = "installed  (joined and checked on first use, or now with --prepare)"
        else:
            state = f"missing    install with: {row['install']}"
        out.print(f"{row['model']:<28} {row['size_bytes'] / 1e9:.2f} GB  {state}")
    out.print("Any LiteLLM model string also works, e.g. --model openai/gpt-4o-mini (needs OPENAI_API_KEY).")


def trainsets_command(as_json: JsonOption = False) -> None:
    """List the trainsets: question format, train/dev/all sizes, corpus, web snapshot and description."""
    from dspy_rag.trainsets.registry import available, load_trainset

    rows = [load_trainset(name).summary() for name in available()]
    if as_json:
        print_json(rows)
        return
    # Descriptions go below the table: as a column they would squeeze it past 80 characters (piped output).
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True)
    for column in ("name", "format", "train", "dev", "all", "corpus", "web"):
        table.add_column(column, justify="right" if column in ("train", "dev", "all") else "left", no_wrap=True)
    for row in rows:
        corpus = (f"{row['passages']:,} passages" if row["passages"] is not None
                  else f"{row['documents']} document{'s' if row['documents'] > 1 else ''}")
        table.add_row(row["name"], row["format"], *(str(row[s]) for s in ("train", "dev", "all")), corpus,
                      row["web"] or "-")
    out.print(table)
    for row in rows:
        out.print(styled((row["name"], "bold"), f": {row['description']}"))


def history_command(
    config: ConfigOption = None,
    as_json: JsonOption = False,
    plot_file: Annotated[Path | None, typer.Option("--plot", metavar="FILE.png",
                                                   help="also draw the score across recompiles")] = None,
) -> None:
    """Every compile and evaluation in the ledger, per artifact lineage, with its gain over parent and uncompiled."""
    from dspy_rag.ledger import ledger_path, read_lines
    from dspy_rag.optimizers.history import (FIGURE_COLUMNS, NOISE_NOTE, OTHER_CODE_NOTE, TEXT_COLUMNS, cells,
                                             lineages, plot, report)

    path = ledger_path(config_of(config))
    lines = read_lines(path)
    entries = [entry for entry in lines if entry is not None]
    if unread := len(lines) - len(entries):
        err.print(f"note: {unread} of the {len(lines)} lines of {path} are no ledger entries this dspy-rag reads "
                  "(torn, edited by hand, or written by a newer version); they are left out")
    grouped = lineages(entries)
    if plot_file:
        plot(grouped, plot_file)
    if as_json:
        print_json(report(path, grouped))
        return
    if not grouped:
        state = "holds no entries" if path.exists() else "is not written yet"
        out.print(f"the ledger {path} (under artifacts.path) {state}: `dspy-rag compile ...` adds an entry per "
                  "compile, `dspy-rag eval ...` one per column")
    for name, rows in grouped.items():
        table = Table(title=f"lineage {name}", box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
        for column in TEXT_COLUMNS:
            table.add_column(column, no_wrap=True)
        for column in FIGURE_COLUMNS:
            table.add_column(column, justify="right", no_wrap=True)
        for row in rows:
            table.add_row(*cells(row))
        print_whole(table)
        if any(row.kept_by_other_code for row in rows):
            out.print(OTHER_CODE_NOTE)
        if any(row.kept_of_noise for row in rows):
            out.print(NOISE_NOTE)
