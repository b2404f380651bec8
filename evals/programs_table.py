"""The three programs side by side from `eval` results folders (scripts/eval-programs): per set, each
column's F1 with its interval, and the deep program's F1 gain over the baseline and over the plain yardstick
with paired intervals; a column's second run beside a set (`<folder>-plain-again`, `<folder>-again`) shows
the run-to-run noise.

    python -m dspy_rag.evals.programs_table evals/results/programs-musique evals/results/programs-hotpotqa ...

Ablation columns (`eval --without`, `--with`) beside a full deep column get a table of their own.
"""

import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from dspy_rag.evals.evaluate import ABLATIONS, interval_text

# An ablation column's label: deep+auto-without-keep_going@model (an artifact's own name may hold "-with-").
ABLATED = re.compile(rf"-(with(?:out)?-(?:{'|'.join(ABLATIONS)}))@")


def _f1(rows: list[dict[str, Any]]) -> list[float]:
    return [r["f1"] for r in rows]


def _column(results: dict[str, Any], pipeline: str) -> str | None:
    """The label of the program's full column (not an ablation)."""
    return next((label for label in results["rows"]
                 if label.split("@")[0].split("+")[0] == pipeline and not ABLATED.search(label)), None)


def ablations(folder: Path) -> str:
    """Each ablation column beside the full deep program: its F1, the paired change, and how many questions it ran
    again (a guard's ablation only those where the guard fired; elsewhere it is the full program's run)."""
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    full = _column(results, "deep")
    if full is None:
        return ""
    base = _f1(results["rows"][full])
    lines = [f"{results['trainset']} ({len(base)} questions), {full}: F1 {statistics.fmean(base):.3f}",
             "| switched | F1 | change | questions run again |", "|---|---|---|---|"]
    for label, rows in results["rows"].items():
        if (ablated := ABLATED.search(label)) and label.startswith(full.split("@")[0]):
            f1 = _f1(rows)
            ran = sum(r.get("same_as") is None for r in rows)
            lines.append(f"| {ablated.group(1)} | {statistics.fmean(f1):.3f} | "
                         f"{statistics.fmean(f1) - statistics.fmean(base):+.3f} {interval_text(f1, base)} | "
                         f"{ran} of {len(rows)} |")
    return "\n".join(lines) + "\n"


def table(folders: list[Path]) -> str:
    lines = ["| set | n | plain F1 | baseline F1 | deep F1 | deep − baseline | deep − plain | deep s (median) |",
             "|---|---|---|---|---|---|---|---|"]
    for folder in folders:
        results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
        labels = {p: _column(results, p) for p in ("plain", "baseline", "deep")}
        if None in labels.values():
            continue
        f1 = {p: _f1(results["rows"][label]) for p, label in labels.items()}
        deep = f1["deep"]
        mean = {p: f"{statistics.fmean(v):.3f} {interval_text(v)}" for p, v in f1.items()}
        gain = {p: f"{statistics.fmean(deep) - statistics.fmean(f1[p]):+.3f} {interval_text(deep, f1[p])}"
                for p in ("baseline", "plain")}
        seconds = statistics.median(r["seconds"] for r in results["rows"][labels["deep"]])
        lines.append(f"| {results['trainset']} | {len(deep)} | {mean['plain']} | {mean['baseline']} | {mean['deep']} "
                     f"| {gain['baseline']} | {gain['plain']} | {seconds:.1f} |")
    return "\n".join(lines) + "\n"


def noise(first: Path, again: Path, pipeline: str = "plain") -> str:
    """The same column run twice on the same questions: the mean F1 of each run and the paired difference."""
    runs = [json.loads((f / "results.json").read_text(encoding="utf-8")) for f in (first, again)]
    a, b = (_f1(r["rows"][_column(r, pipeline)]) for r in runs)
    return (f"{runs[0]['trainset']} {pipeline}: F1 {statistics.fmean(a):.3f} then {statistics.fmean(b):.3f}, "
            f"difference {statistics.fmean(b) - statistics.fmean(a):+.3f} {interval_text(b, a)}, "
            f"{sum(x != y for x, y in zip(a, b, strict=True))} of {len(a)} questions scored differently")


if __name__ == "__main__":
    folders = [Path(p) for p in sys.argv[1:]]
    print(table(folders))
    for folder in folders:  # scripts/eval-programs runs some columns a second time beside a set
        for again in (folder.with_name(folder.name + suffix) for suffix in ("-plain-again", "-again")):
            if (again / "results.json").is_file():
                ran = json.loads((again / "results.json").read_text(encoding="utf-8"))
                for pipeline in ("plain", "baseline", "deep"):
                    if _column(ran, pipeline) is not None:
                        print(noise(folder, again, pipeline))
    for folder in folders:
        for each in (folder, folder.with_name(folder.name + "-again")):
            if (each / "results.json").is_file() and any(
                    map(ABLATED.search, json.loads((each / "results.json").read_text(encoding="utf-8"))["rows"])):
                print(ablations(each))
