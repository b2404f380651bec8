"""`dspy-rag eval`: programs side by side on the same questions, one column per pipeline × artifact × model.

    dspy-rag eval --questions nvidia-10k --artifact none --artifact nvidia-10k-labeled --model local/qwen2.5-coder-1.5b

Every column is scored per question with the shared metrics; the table gives means with bootstrap
intervals and each column's gain over the first with a paired interval (same questions resampled). Rows
are cached as they finish, so an interrupted run resumes, and every column appends a line to the ledger.
"""

from __future__ import annotations

import itertools
import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from dspy_rag.config import Config, load_config
from dspy_rag.errors import UserError
from dspy_rag.evals.bench_answers import PIPELINES, RESULTS, EvalSet, Row, cached_rows, load_set, run_question, score
from dspy_rag.evals.metrics import AnswerScores, weighted_score
from dspy_rag.evals.stats import bootstrap_ci, paired_delta_ci
from dspy_rag.files import write_atomic, write_json_atomic
from dspy_rag.optimizers.ledger import LedgerEntry, append, ledger_path
from dspy_rag.trainsets.registry import load_trainset

if TYPE_CHECKING:
    import dspy

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
MIN_QUESTIONS_FOR_AN_INTERVAL = 8  # below this a percentile bootstrap is too narrow to mean anything


@dataclass(frozen=True)
class Column:
    pipeline: str
    artifact: str  # "none" for the uncompiled deep program and for the baseline
    model: str

    @property
    def label(self) -> str:
        program = self.pipeline if self.artifact == "none" else f"{self.pipeline}+{self.artifact}"
        return f"{program}@{self.model.split('/')[-1]}"


def columns_of(pipelines: list[str], artifacts: list[str], models: list[str]) -> list[Column]:
    """Every combination; an artifact holds deep prompts, so the baseline runs once per model."""
    made = [Column(p, a if p == "deep" else "none", m) for m, p, a in itertools.product(models, pipelines, artifacts)]
    return list(dict.fromkeys(made))


def ledger_name(column: Column) -> str | None:
    """The baseline is its own lineage in `history`; the uncompiled deep program is None."""
    if column.pipeline == "baseline":
        return "baseline"
    return None if column.artifact == "none" else column.artifact


def weighted(row: Row, weights: dict[str, float]) -> float:
    return weighted_score(AnswerScores(row.em, row.f1, row.contains, row.evidence_recall, row.citation_validity),
                          weights)


def interval_text(values: list[float], paired_with: list[float] | None = None) -> str:
    if len(values) < MIN_QUESTIONS_FOR_AN_INTERVAL:
        return "(too few questions for an interval)"
    low, high = paired_delta_ci(paired_with, values) if paired_with is not None else bootstrap_ci(values)
    return f"[{low:+.3f}, {high:+.3f}]" if paired_with is not None else f"[{low:.3f}, {high:.3f}]"


def summary(rows: list[Row], weights: dict[str, float], first: list[Row] | None) -> dict[str, Any]:
    scores = [weighted(r, weights) for r in rows]
    kept = lambda name: [getattr(r, name) for r in rows if getattr(r, name) is not None]  # noqa: E731
    result: dict[str, Any] = {
        "questions": len(rows), "score": round(statistics.fmean(scores), 4), "score_ci": interval_text(scores),
        **{name: round(statistics.fmean(kept(name)), 4) if kept(name) else None
           for name in ("em", "f1", "contains", "evidence_recall", "citation_validity")},
        "median_lm_calls": statistics.median(r.lm_calls for r in rows),
        "median_tokens": statistics.median(r.tokens for r in rows),
        "median_seconds": round(statistics.median(r.seconds for r in rows), 2),
    }
    if first is not None:
        base = [weighted(r, weights) for r in first]
        result["delta"] = round(statistics.fmean(scores) - statistics.fmean(base), 4)
        result["delta_ci"] = interval_text(scores, base)
    return result


def markdown(results: dict[str, dict[str, Any]], title: str) -> str:
    names = ["score", "score_ci", "delta", "delta_ci", "em", "f1", "evidence_recall", "citation_validity",
             "median_lm_calls", "median_tokens", "median_seconds"]
    lines = [f"# {title}", "", "| column | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(str(r.get(n, "")) for n in names) + " |" for label, r in results.items()]
    return "\n".join(lines) + "\n"


def print_table(results: dict[str, dict[str, Any]], title: str) -> None:
    table = Table(title=title)
    for name in ("column", "score", "95% CI", "Δ first", "Δ 95% CI", "F1", "evidence", "citations", "calls", "s"):
        table.add_column(name)
    for label, r in results.items():
        table.add_row(label, f"{r['score']:.3f}", r["score_ci"], f"{r.get('delta', 0):+.3f}" if "delta" in r else "",
                      r.get("delta_ci", ""), f"{r['f1']:.3f}", str(r["evidence_recall"]), str(r["citation_validity"]),
                      str(r["median_lm_calls"]), str(r["median_seconds"]))
    out.print(table)


def run_columns(eval_set: EvalSet, columns: list[Column], config: Config, cache: Path,
                build: Any) -> dict[Column, list[Row]]:
    done = cached_rows(cache)
    cache.parent.mkdir(parents=True, exist_ok=True)
    rows: dict[Column, list[Row]] = {}
    for column in columns:
        program: dspy.Module | None = None
        for n, question in enumerate(eval_set.questions, start=1):
            key = (eval_set.name, column.label, question.id)
            if key not in done:
                program = program or build(column)
                prediction, usage = run_question(program, question)
                done[key] = score(eval_set, column.label, question, prediction, usage)
                with cache.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(asdict(done[key])) + "\n")
            row = done[key]
            err.print(f"{column.label} {n}/{len(eval_set.questions)} f1 {row.f1:.2f} {row.seconds:.0f} s", highlight=False)
            rows.setdefault(column, []).append(row)
    return rows


def eval_command(
    questions: Annotated[str, typer.Option(help="a trainset name or YAML definition (its dev split is asked)")],
    pipeline: Annotated[list[str] | None, typer.Option(help="baseline and/or deep (repeat; default deep)")] = None,
    artifact: Annotated[list[str] | None, typer.Option(help="deep: artifact name/folder or none (repeat)")] = None,
    model: Annotated[list[str] | None, typer.Option(help="model (repeat; default the configured one)")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="first N dev questions")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="folder for results JSON, rows and report")] = None,
    config_file: Annotated[Path | None, typer.Option("--config", help="YAML configuration")] = None,
) -> None:
    """Evaluate pipelines, artifacts and models side by side on a trainset's dev questions."""
    import dspy

    from dspy_rag.cli import program_for
    from dspy_rag.models import build_lm
    from dspy_rag.optimizers.metric import DEFAULT_WEIGHTS, describe

    config = load_config(config_file)
    pipelines = pipeline or ["deep"]
    if unknown := set(pipelines) - set(PIPELINES):
        raise UserError(f"unknown pipeline {sorted(unknown)}; choose baseline or deep")
    columns = columns_of(pipelines, artifact or ["none"], model or [config.lm.model])
    trainset = load_trainset(questions)
    eval_set = load_set(trainset, config)
    eval_set.questions = eval_set.questions[:limit]
    folder = out_dir or RESULTS / f"eval-{trainset.name}"
    lms: dict[str, dspy.LM] = {}

    def build(column: Column) -> dspy.Module:
        settings = config.model_copy(update={"lm": config.lm.model_copy(update={"model": column.model})})
        if column.model not in lms:
            lms[column.model] = build_lm(settings.lm)
        dspy.configure(lm=lms[column.model], adapter=dspy.JSONAdapter())
        return program_for(column.pipeline, settings, eval_set.index, eval_set.web, "llm", lambda _msg: None,
                           column.artifact)

    rows = run_columns(eval_set, columns, config, folder / "rows.jsonl", build)
    weights = dict(DEFAULT_WEIGHTS)
    first = rows[columns[0]]
    results = {c.label: summary(rows[c], weights, None if c == columns[0] else first) for c in columns}
    title = f"{trainset.name} dev, {len(eval_set.questions)} questions, metric {describe(weights)}"
    print_table(results, title)
    write_json_atomic(folder / "results.json", {"trainset": trainset.name, "title": title, "columns": results,
                                                "rows": {c.label: [asdict(r) for r in rows[c]] for c in columns}})
    write_atomic(folder / "report.md", markdown(results, title).encode("utf-8"))
    for column in columns:
        append(ledger_path(config), LedgerEntry(
            kind="eval", artifact=ledger_name(column), parent=None,
            model=column.model, trainset=trainset.name, trainset_hash=trainset.content_hash, split="dev",
            metric=describe(weights), score=results[column.label]["score"], score_before=None,
            questions=len(eval_set.questions), lm_calls=sum(r.lm_calls for r in rows[column]),
            tokens=sum(r.tokens for r in rows[column]), seconds=round(sum(r.seconds for r in rows[column]), 1)))
