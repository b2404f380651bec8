"""Deep `ask` latency: wall time per question of the default deep program over the 10-K and the web snapshot.

    .venv/bin/python -m dspy_rag.evals.bench_ask_deep [--model local/qwen2.5-coder-0.5b] [--artifact auto]
        [--limit N] [--out evals/results/ask-deep-default.json]

The questions are the reference question and the 10-K set's questions that join sections or need the web (its
dev split first): those a planner should split into two or three steps (the uncompiled 0.5B splits few of
them; `--artifact nvidia-10k-plans` splits more). Each is asked by a fresh `dspy-rag ask
--json` process, as a user would run it, with the working folder's configured artifacts folder (run from the
checkout: the repository's, which `--artifact` names and which holds the trained reranker) and the offline web
snapshot. The figures are medians, over all runs and over the runs of two or three steps (the latency target
names those). Run it on an idle machine: another LM job on the other core halves llama.cpp's speed.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dspy_rag.config import load_config
from dspy_rag.evals.bench_foundation import CLI, timed
from dspy_rag.evals.rows import LATENCY_STEPS, RESULTS, median_seconds_of_latency_steps
from dspy_rag.files import write_json_atomic
from dspy_rag.trainsets.locations import shared_data, tenk_filing
from dspy_rag.trainsets.registry import load_trainset

MULTI_STEP_KINDS = ("multi-section", "10k+web")


def questions(limit: int | None) -> list[str]:
    tenk = load_trainset("nvidia-10k")
    asked = [q for split in ("dev", "train") for q in tenk.questions(split) if q.kind in MULTI_STEP_KINDS]
    return [load_trainset("reference").questions("dev")[0].question, *(q.question for q in asked)][:limit]


def run(question: str, folder: Path, model: str, artifact: str) -> dict[str, Any]:
    result = timed([CLI, "ask", "--model", model, "--artifact", artifact, "--web", str(shared_data() / "web-snapshot"),
                    "--json", question], folder)
    answer = json.loads(result["stdout"])
    trajectory = answer["trajectory"]
    return {"question": question, "seconds": round(result["seconds"], 2), "steps": len(trajectory["steps"]),
            "lm_calls": trajectory["lm_calls"], "lm_seconds": trajectory["lm_seconds"],
            "program_seconds": trajectory["seconds"], "peak_rss_mb": round(result["peak_rss_mb"]),
            "stopped_early": trajectory["stopped_early"], "tools": [s["tool"] for s in trajectory["steps"]]}


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "runs": len(runs),
        "steps": {str(n): sum(r["steps"] == n for r in runs) for n in sorted({r["steps"] for r in runs})},
        "seconds_median": median([r["seconds"] for r in runs]),
        "seconds_median_2_3_steps": median_seconds_of_latency_steps([(r["steps"], r["seconds"]) for r in runs]),
        "runs_2_3_steps": sum(r["steps"] in LATENCY_STEPS for r in runs),
        # Time inside the program but outside LM calls: retrieval, reranking, citation checks.
        "outside_lm_share_median": median([1 - r["lm_seconds"] / r["program_seconds"] for r in runs]),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="local/qwen2.5-coder-0.5b")
    parser.add_argument("--artifact", default="auto", help="the compiled prompts to ask with (auto, as ask: the "
                        "default shipped for the model; none: uncompiled)")
    parser.add_argument("--limit", type=int, default=8, help="questions asked (the reference question first)")
    parser.add_argument("--out", type=Path, default=RESULTS / "ask-deep-default.json")
    args = parser.parse_args()
    runs = []
    artifacts = load_config().artifacts.path.resolve()  # the asking happens in a scratch folder
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        (folder / "dspy-rag.yaml").write_text(f"artifacts: {{path: {artifacts}}}\n", encoding="utf-8")
        timed([CLI, "ingest", str(tenk_filing())], folder)
        for question in questions(args.limit):
            runs.append(run(question, folder, args.model, args.artifact))
            print(f"{runs[-1]['seconds']:.1f} s, {runs[-1]['steps']} steps: {question}", file=sys.stderr)
    results = {"date": time.strftime("%Y-%m-%d"), "model": args.model, "artifact": args.artifact, **summary(runs),
               "per_question": runs}
    write_json_atomic(args.out, results)
    print(json.dumps({k: v for k, v in results.items() if k != "per_question"}, indent=1))


if __name__ == "__main__":
    main()
