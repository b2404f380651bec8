"""Transfer: how much of an artifact's gain over the uncompiled program it keeps on another model than the one it
was compiled on. Four `eval` columns paired by question: the uncompiled program and the artifact on the home model,
then on the other; per set and over all of them, both gains (score, as `history` keeps it, and F1) with 95% paired
intervals and the share kept, whose interval resamples the same questions from all four.

    python -m dspy_rag.evals.transfer \\
        evals/results/pooled-default deep@qwen2.5-coder-0.5b deep+deep-qwen2.5-coder-0.5b@qwen2.5-coder-0.5b \\
        evals/results/pooled-transfer-1.5b deep@qwen2.5-coder-1.5b deep+deep-qwen2.5-coder-0.5b@qwen2.5-coder-1.5b
"""

import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from dspy_rag.evals.evaluate import interval_text
from dspy_rag.evals.paired_columns import ALL, column_rows, paired
from dspy_rag.evals.research_metric import DEFAULT_WEIGHTS
from dspy_rag.evals.rows import Row, weighted
from dspy_rag.evals.stats import MIN_QUESTIONS_FOR_AN_INTERVAL, SAME_SCORE, share_kept_ci

# The runs of one question: the uncompiled program and the artifact at home, then away.
Quartet = tuple[Row, Row, Row, Row]
MEASURES: dict[str, Callable[[Row], float]] = {"score": lambda row: weighted(row, DEFAULT_WEIGHTS),
                                               "F1": lambda row: row.f1}


def gain_text(before: list[float], after: list[float]) -> str:
    return f"{statistics.fmean(after) - statistics.fmean(before):+.3f} {interval_text(after, before)}"


def share_text(runs: list[list[float]]) -> str:
    """The share kept with its interval; none where the artifact gained nothing at home (there is nothing to
    keep)."""
    home = statistics.fmean(runs[1]) - statistics.fmean(runs[0])
    if home <= SAME_SCORE:
        return "- (no gain at home)"
    share = (statistics.fmean(runs[3]) - statistics.fmean(runs[2])) / home
    if len(runs[0]) < MIN_QUESTIONS_FOR_AN_INTERVAL:
        return f"{share:.0%}"
    low, high = share_kept_ci(*runs)
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{share:.0%} (unbounded: the gain at home may be none)"
    return f"{share:.0%} [{low:.0%}, {high:.0%}]"


def transfer_table(quartets: list[Quartet]) -> str:
    """Per set, then over all sets: for each measure, the gain at home, the gain away, and the share kept."""
    sets = list(dict.fromkeys(quartet[0].set for quartet in quartets))
    header = " | ".join(f"{name}: gain at home | {name}: gain away | {name}: kept" for name in MEASURES)
    lines = [f"| set | questions | {header} |", "|---|---|" + "---|" * 3 * len(MEASURES)]
    for name in [*sets, ALL] if len(sets) > 1 else sets:
        chosen = [quartet for quartet in quartets if name in (ALL, quartet[0].set)]
        cells = []
        for measure in MEASURES.values():
            runs = [[measure(quartet[i]) for quartet in chosen] for i in range(4)]
            cells += [gain_text(runs[0], runs[1]), gain_text(runs[2], runs[3]), share_text(runs)]
        lines.append(f"| {name} | {len(chosen)} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    if len(argv) != 6:
        raise SystemExit("usage: python -m dspy_rag.evals.transfer HOME_FOLDER HOME_UNCOMPILED HOME_ARTIFACT "
                         "AWAY_FOLDER AWAY_UNCOMPILED AWAY_ARTIFACT")
    home, away = Path(argv[0]), Path(argv[3])
    columns = [column_rows(home, argv[1]), column_rows(home, argv[2]), column_rows(away, argv[4]),
               column_rows(away, argv[5])]
    for other in columns[1:]:
        paired(columns[0], other)  # all four on the same questions
    print(transfer_table([(row, *(column[key] for column in columns[1:])) for key, row in columns[0].items()]))


if __name__ == "__main__":
    main(sys.argv[1:])
