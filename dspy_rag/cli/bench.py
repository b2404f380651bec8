"""`dspy-rag bench retrieval`: the retrieval benchmark (dspy_rag.evals.bench_retrieval), its figures as tables
and, with --json FILE, as JSON."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.table import Table

from dspy_rag import paths
from dspy_rag.cli.console import StageBar, bar_display, err, out
from dspy_rag.evals.bench_retrieval import (
    ALL_GOLD_K,
    BRIDGE_ONLY,
    CUTOFFS,
    NO_BRIDGE,
    RERANKED,
    bench_config,
    chosen_reranker,
    held_out_ids,
    require_file,
    run,
)
from dspy_rag.evals.bench_scaling import SCALING_TOP_K, parse_sizes, scaling
from dspy_rag.files import write_json_atomic
from dspy_rag.trainsets.corpus_index import default_work_dir

if TYPE_CHECKING:
    from dspy_rag.reranker import Reranker

bench_app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                        help="Benchmarks: retrieval recall and latency on multi-hop question sets.")


@bench_app.callback()
def _bench() -> None:
    """Without a callback Typer would run the lone `retrieval` command directly, dropping its name."""


def dataset_run(questions: Path, corpus: Path, work: Path, reranker: "Reranker | None", top_k: int,
                limit: int | None, only: set[str] | None = None) -> dict[str, Any]:
    err.print(f"index: {work}")
    with bar_display(transient=True) as progress:
        return run(questions, corpus, work, reranker, top_k, limit, StageBar(progress), only)


def figures_table(title: str, columns: list[str]) -> Table:
    """A compact table that fits 80 columns (piped output): no side borders, cells never wrapped or cut."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    for number, column in enumerate(columns):
        table.add_column(column, justify="left" if number == 0 else "right", no_wrap=True)
    return table


def print_run(result: dict[str, Any]) -> None:
    table = figures_table(f"{result['format']}: {result['questions']} questions, {result['corpus_passages']} "
                          f"passages ({result['chunks']} chunks), top_k {result['top_k']}",
                          ["strategy", "R@2", "R@5", "R@10", f"all@{ALL_GOLD_K}", "p50 ms", "p90 ms", "rerank ms"])
    for name, row in result["strategies"].items():
        rerank = row.get("rerank_ms")
        table.add_row(name, *(f"{row[f'recall@{k}']:.3f}" for k in CUTOFFS), f"{row[f'all_in_top{ALL_GOLD_K}']:.3f}",
                      f"{row['latency_ms']['median']:.1f}", f"{row['latency_ms']['p90']:.1f}",
                      f"{rerank['median']:.1f}" if rerank else "-")
    out.print(table)
    out.print(f"reranker: {result['reranker'] or 'none'}")
    best_gain, hybrid_gain = result["rerank_gain_recall@5"], result["rerank_gain_over_hybrid_recall@5"]
    line = f"best single strategy (recall@5): {result['best_single']}"
    out.print(line + (f"; {RERANKED} gains {best_gain:+.3f} recall@5 over it, {hybrid_gain:+.3f} over hybrid"
                      if best_gain is not None else ""))
    if NO_BRIDGE in result["strategies"]:
        out.print(f"{RERANKED} bridges; {NO_BRIDGE}: the same reranker without, {BRIDGE_ONLY}: the bridge alone")
    if result["gold_missing_from_corpus"]:
        out.print(f"note: {result['gold_missing_from_corpus']} gold passages are not in the corpus")


def print_scaling(rows: list[dict[str, Any]]) -> None:
    table = figures_table(f"synthetic scaling: median/p90 ms per query, top {SCALING_TOP_K}",
                          ["chunks", "build kw/vec s", "disk MB", "commit KB", "start s/cpu", "vector", "keyword",
                           "hybrid"])
    for row in rows:
        table.add_row(f"{row['chunks']:,}", f"{row['build_seconds']['keyword']:.0f}/{row['build_seconds']['vector']:.0f}",
                      f"{row['disk_mb']['catalog']:.0f}+{row['disk_mb']['chroma']:.0f}",
                      f"{row['commit_kb']['median']:,}", f"{row['start']['seconds']:.1f}/{row['start']['cpu_seconds']:.1f}",
                      *(f"{row[k]['median']:.1f}/{row[k]['p90']:.1f}" for k in ("vector_ms", "keyword_ms", "hybrid_ms")))
    out.print(table)
    out.print("disk: catalog+Chroma; commit: median bytes a file's commit wrote; start: a reader process to its "
              "first retrieval (wall / CPU seconds); vector queries are random vectors: no query embedding time is included")


@bench_app.command("retrieval")
def retrieval(
    questions: Annotated[Path | None, typer.Option("--questions", metavar="FILE", help="HotpotQA, MuSiQue, MultiHop-RAG or JSONL questions")] = None,
    corpus: Annotated[Path | None, typer.Option("--corpus", metavar="FILE", help="the passages the gold ids point into")] = None,
    limit: Annotated[int | None, typer.Option("--limit", metavar="N", min=1, help="only the first N questions with gold passages")] = None,
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=200, help="passages each strategy retrieves")] = 20,
    work: Annotated[Path | None, typer.Option("--work", metavar="DIR", help="index folder (default: temp dir keyed by the corpus hash)")] = None,
    use_reranker: Annotated[bool, typer.Option("--reranker/--no-reranker", help="also score hybrid+rerank with the configured reranker")] = True,
    held_out_only: Annotated[bool, typer.Option("--held-out-only", help="only the questions the trained reranker was not trained on")] = False,
    sizes: Annotated[str | None, typer.Option("--scaling", metavar="N,N", help="also time backends on synthetic corpora of these chunk counts")] = None,
    json_path: Annotated[Path | None, typer.Option("--json", metavar="FILE", help="write the figures to this JSON file")] = None,
) -> None:
    """Recall@2/5/10 and latency of vector, keyword and hybrid retrieval (and hybrid+rerank) on a question set."""
    scaling_sizes = parse_sizes(sizes) if sizes else None
    if json_path is not None:  # checked now: the figures are written after the whole run
        paths.output_file(json_path, "--json")
    figures: dict[str, Any] = {}
    if questions is not None or corpus is not None or scaling_sizes is None:
        corpus_file = require_file(corpus, "--corpus")
        questions_file = require_file(questions, "--questions")
        work_dir = work or default_work_dir(corpus_file)
        reranker = chosen_reranker(use_reranker, bench_config(work_dir, top_k))
        only = held_out_ids(reranker) if held_out_only else None
        figures["retrieval"] = dataset_run(questions_file, corpus_file, work_dir, reranker, top_k, limit, only)
        print_run(figures["retrieval"])
    if scaling_sizes:
        err.print(f"scaling: building synthetic corpora of {', '.join(f'{n:,}' for n in scaling_sizes)} chunks …")
        with bar_display(transient=True) as display:
            figures["scaling"] = scaling(scaling_sizes, progress=StageBar(display))
        print_scaling(figures["scaling"])
    if json_path is not None:
        write_json_atomic(json_path, figures)
