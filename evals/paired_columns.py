"""`eval` columns paired by question, each from its own results folder: what each column costs over all its
questions (steps, LM calls, tokens, seconds) beside its F1, then for every pair, per set and over all of them, both
columns' score (the compile metric's default weights) and F1, and the later column's gain over the earlier with
95% paired bootstrap intervals, as `eval` shows a column beside its first one, and where the two part (in steps
or in answers). For columns that ran in separate evals, where one eval could not reuse the other's runs.

    python -m dspy_rag.evals.paired_columns evals/results/pooled-dev deep@qwen2.5-coder-0.5b \\
        evals/results/pooled-dev-default deep+auto@qwen2.5-coder-0.5b
"""

import itertools
import statistics
import sys
from pathlib import Path

from dspy_rag.evals.evaluate import interval_text, summary
from dspy_rag.evals.research_metric import DEFAULT_WEIGHTS
from dspy_rag.evals.rows import Row, cached_rows, weighted

ALL = "all"


def column_rows(folder: Path, column: str) -> dict[tuple[str, str], Row]:
    """A column's rows in an eval folder, by (set, question id)."""
    rows = cached_rows(folder / "rows.jsonl")
    if not rows:
        raise SystemExit(f"{folder}: no rows.jsonl with rows; give an `eval --out` folder")
    found = {(s, question): row for (s, label, question), row in rows.items() if label == column}
    if not found:
        labels = ", ".join(sorted({label for _, label, _ in rows}))
        raise SystemExit(f"{folder}: no column {column!r}; its columns are {labels}")
    return found


def paired(first: dict[tuple[str, str], Row], second: dict[tuple[str, str], Row]) -> list[tuple[Row, Row]]:
    """The two columns' rows of each question, in the first column's order; both must hold the same questions."""
    if missing := set(first) ^ set(second):
        raise SystemExit(f"the columns differ in {len(missing)} question(s), e.g. {sorted(missing)[0]}; "
                         "pair columns run on the same questions")
    return [(row, second[key]) for key, row in first.items()]


def gains_table(pairs: list[tuple[Row, Row]]) -> str:
    """Per set, then over all sets: both columns' score and F1, and the second's gains with paired intervals."""
    sets = list(dict.fromkeys(a.set for a, _ in pairs))
    lines = ["| set | questions | score: first → second | score gain | F1: first → second | F1 gain "
             "| up / down (score) | steps (mean) | tokens (median) |", "|---|---|---|---|---|---|---|---|---|"]
    for name in [*sets, ALL] if len(sets) > 1 else sets:
        chosen = [(a, b) for a, b in pairs if name in (ALL, a.set)]
        first, second = [a for a, _ in chosen], [b for _, b in chosen]
        before, after = summary(first, DEFAULT_WEIGHTS, None), summary(second, DEFAULT_WEIGHTS, first)
        scores = [(weighted(a, DEFAULT_WEIGHTS), weighted(b, DEFAULT_WEIGHTS)) for a, b in chosen]
        up, down = sum(b > a for a, b in scores), sum(b < a for a, b in scores)
        # means and gains unrounded: the summary's are rounded to 4 places, and printing them to 3 rounds twice
        score_before, score_after = statistics.fmean(a for a, _ in scores), statistics.fmean(b for _, b in scores)
        f1_before, f1_after = statistics.fmean(a.f1 for a in first), statistics.fmean(b.f1 for b in second)
        lines.append(
            f"| {name} | {len(chosen)} | {score_before:.3f} → {score_after:.3f} | "
            f"{score_after - score_before:+.3f} {after['delta_ci']} | {f1_before:.3f} → {f1_after:.3f} | "
            f"{f1_after - f1_before:+.3f} {after['f1_delta_ci']} | {up} / {down} | "
            f"{before['mean_steps']:.2f} → {after['mean_steps']:.2f} | "
            f"{before['median_tokens']:,.0f} → {after['median_tokens']:,.0f} |")
    return "\n".join(lines) + "\n"


PARTINGS = ("fewer steps", "more steps", "as many steps, another answer", "as many steps, the same answer")


def parting(first: Row, second: Row) -> str:
    """How the second column's run of a question parts from the first's: in how many steps it took (a stop
    decision), else in its answer (what its steps searched, or how the answer was written)."""
    if second.steps != first.steps:
        return PARTINGS[0] if second.steps < first.steps else PARTINGS[1]
    return PARTINGS[2] if second.answer != first.answer else PARTINGS[3]


def parting_table(pairs: list[tuple[Row, Row]]) -> str:
    """Where the second column's F1 gain and LM-call change come from, by how its runs part from the first's
    (`parting`); each group's share is its change over all questions, so the shares add up to the mean change."""
    lines = ["| second column's runs | questions | F1 up / down | share of F1 gain | share of LM-call change |",
             "|---|---|---|---|---|"]
    for name in PARTINGS:
        chosen = [(a, b) for a, b in pairs if parting(a, b) == name]
        up, down = sum(b.f1 > a.f1 for a, b in chosen), sum(b.f1 < a.f1 for a, b in chosen)
        f1_share = sum(b.f1 - a.f1 for a, b in chosen) / len(pairs)
        calls_share = sum(b.lm_calls - a.lm_calls for a, b in chosen) / len(pairs)
        lines.append(f"| {name} | {len(chosen)} | {up} / {down} | {f1_share:+.3f} | {calls_share:+.2f} |")
    return "\n".join(lines) + "\n"


def costs_table(columns: dict[str, list[Row]]) -> str:
    """Each column over all its questions: F1 with its interval, score, and what it spent, its LM calls also as a
    change from the first column's."""
    lines = ["| column | questions | F1 | score | steps (mean) | LM calls (mean) | calls vs first | tokens (mean) "
             "| seconds (median) |", "|---|---|---|---|---|---|---|---|---|"]
    first_calls = statistics.fmean(r.lm_calls for r in next(iter(columns.values()))) or 1  # a column of no calls
    for label, rows in columns.items():
        made, calls = summary(rows, DEFAULT_WEIGHTS, None), statistics.fmean(r.lm_calls for r in rows)
        f1, score = statistics.fmean(r.f1 for r in rows), statistics.fmean(weighted(r, DEFAULT_WEIGHTS) for r in rows)
        lines.append(f"| {label} | {len(rows)} | {f1:.3f} {interval_text([r.f1 for r in rows])} | "
                     f"{score:.3f} | {made['mean_steps']:.2f} | {calls:.2f} | "
                     f"{calls / first_calls - 1:+.1%} | {made['mean_tokens']:,} | {made['median_seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    if len(argv) < 4 or len(argv) % 2:
        raise SystemExit("usage: python -m dspy_rag.evals.paired_columns FOLDER COLUMN FOLDER COLUMN "
                         "[FOLDER COLUMN ...]")
    labels = [f"{column} ({folder})" for folder, column in zip(argv[::2], argv[1::2], strict=True)]
    if len(set(labels)) < len(labels):
        raise SystemExit("a column is named twice; give each FOLDER COLUMN pair once")
    columns = {label: column_rows(Path(folder), column)
               for label, folder, column in zip(labels, argv[::2], argv[1::2], strict=True)}
    for (_, first), (_, second) in itertools.combinations(columns.items(), 2):
        paired(first, second)  # every column on the same questions before anything is printed
    print(costs_table({label: list(rows.values()) for label, rows in columns.items()}))
    for (a, first), (b, second) in itertools.combinations(columns.items(), 2):
        print(f"{a} → {b}\n")
        pairs = paired(first, second)
        print(gains_table(pairs))
        print(parting_table(pairs))


if __name__ == "__main__":
    main(sys.argv[1:])
