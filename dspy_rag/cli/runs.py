"""`dspy-rag runs list|prune|export|import`: the run store (dspy_rag.run_store) that eval, compile and
distill-policy share."""

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from dspy_rag import paths
from dspy_rag.cli.console import out, print_whole
from dspy_rag.cli.options import ConfigOption, JsonOption, config_of, print_json
from dspy_rag.run_store import RunStore

runs_app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                       help="The stored program runs that eval, compile and distill-policy reuse: list, prune, "
                       "carry to another machine.")


def size_text(size: int) -> str:
    return f"{size / 2**20:.1f} MB"


def print_summary(summary: dict[str, Any]) -> None:
    out.print(f"{summary['runs']} runs, {size_text(summary['payload_bytes'])} of {size_text(summary['max_bytes'])} "
              f"(file {size_text(summary['file_bytes'])}) in {summary['path']}")
    if not summary["groups"]:
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("kind", "set", "model", "program", "runs", "size", "last used"):
        table.add_column(column, justify="right" if column in ("runs", "size") else "left", no_wrap=True)
    for group in summary["groups"]:
        used = datetime.fromtimestamp(group["last_used"], UTC).isoformat(timespec="minutes")
        table.add_row(group["kind"], group["set"], group["model"], group["program"], str(group["runs"]),
                      size_text(group["bytes"]), used)
    print_whole(table)


@runs_app.command("list")
def list_runs(config: ConfigOption = None, as_json: JsonOption = False) -> None:
    """Count the stored runs by kind, set, model and program, with their size."""
    with RunStore.of(config_of(config)) as store:
        summary = store.summary()
    if as_json:
        print_json(summary)
        return
    print_summary(summary)


@runs_app.command("prune")
def prune_runs(
    to_mb: Annotated[float | None, typer.Option("--to", min=0.0, help="MB to keep, least recently used runs "
                                                "dropped first (default: runs.max_mb; 0 empties the store)")] = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Drop the least recently used runs down to a size, and give their space back."""
    with RunStore.of(config_of(config)) as store:
        dropped = store.prune(int(store.max_bytes if to_mb is None else to_mb * 2**20))
        store.compact()
        summary = {"dropped": dropped, **store.summary()}
    if as_json:
        print_json(summary)
        return
    out.print(f"dropped {dropped} runs")
    print_summary(summary)


@runs_app.command("export")
def export_runs(
    file: Annotated[Path, typer.Argument(help="The file to write (gzipped JSON lines)")],
    set_name: Annotated[str | None, typer.Option("--set", help="Only the runs on this set")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Only the runs of this model")] = None,
    program: Annotated[str | None, typer.Option("--program", help="Only the runs of this program, as `runs list` "
                                                "shows it (an eval column's label)")] = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Write stored runs to a file that `runs import` adds to another machine's store, so an eval or compile
    there reuses them."""
    chosen = {"set_name": set_name, "model": model, "program": program}
    target = paths.output_file(file, "the export")
    with RunStore.of(config_of(config)) as store:
        count = store.export(target, {column: value for column, value in chosen.items() if value is not None})
    if as_json:
        print_json({"exported": count, "file": str(target)})
        return
    none = "; no stored run matched (`dspy-rag runs list` shows what is stored)" if count == 0 else ""
    out.print(f"exported {count} runs to {target}{none}")


@runs_app.command("import")
def import_runs(
    file: Annotated[Path, typer.Argument(help="A file `dspy-rag runs export` wrote")],
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Add the runs of an exported file to the store; a run already stored is kept as it is."""
    with RunStore.of(config_of(config)) as store:
        added, present, dropped = store.import_from(paths.named(file, "the import file"))
    if as_json:
        print_json({"imported": added, "already_stored": present, "dropped": dropped})
        return
    pruned = f"; {dropped} least recently used runs dropped to keep runs.max_mb" if dropped else ""
    out.print(f"imported {added} runs ({present} already stored{pruned})")
