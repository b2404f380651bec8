"""Router accuracy: the deep program's router on the routing set (trainsets/routing.jsonl) over the 10-K, with its
route_check guard and without it (the LM's own route, from the same call).

    .venv/bin/python -m dspy_rag.evals.bench_router [--split dev] [--model M] [--out evals/results/router.json]

Each question is routed as `ask` would route it with `roles.router: true`: the question's own passages retrieved
and reranked first (what route_check judges), then one route call. Only the router runs: a routed research
question's research is what `eval` measures. The report gives accuracy, the confusion of gold and chosen routes,
and what routing saves: the LM calls the deep program's research would have spent on questions it declines.
"""

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import dspy

from dspy_rag.config import Config, load_config
from dspy_rag.evals.rows import RESULTS
from dspy_rag.files import write_json_atomic
from dspy_rag.pipelines.deep import DeepResearch
from dspy_rag.pipelines.evidence import question_passages
from dspy_rag.pipelines.lm_calls import LMCalls
from dspy_rag.pipelines.research_run import ResearchRun
from dspy_rag.pipelines.trajectory import Trajectory
from dspy_rag.trainsets.registry import DEFINITIONS, load_trainset

QUESTIONS = DEFINITIONS / "routing.jsonl"
RESEARCH_CALLS = 6  # the default deep program's calls for a one-step question (docs/results/programs.md)


def routing_questions(split: str, path: Path = QUESTIONS) -> list[dict[str, str]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if split == "all" or r["split"] == split]


def route_one(program: DeepResearch, question: str) -> dict[str, Any]:
    """The routes chosen with and without route_check, from one route call, and the call's seconds."""
    record = Trajectory(question, "llm", program.reranker.name if program.reranker else "none", "off")
    run = ResearchRun(record, LMCalls(program.budgets, record.calls), lambda kind, text: None)
    floor, _, _ = question_passages(question, program.retriever, program.reranker, None, program.top_n,
                                    program.injection_guard)
    program.route(question, floor, run)
    fired = [g for g in record.guards if g["guard"] == "route_check"]
    return {"guarded": record.route, "unguarded": fired[0]["saw"].removeprefix("route ") if fired else record.route,
            "reason": record.route_reason, "seconds": sum(c.seconds for c in record.calls),
            "degraded": record.degraded}


def accuracy(rows: list[dict[str, Any]], chosen: str) -> dict[str, Any]:
    confusion = Counter(f"{r['route']} -> {r[chosen]}" for r in rows)
    declined = [r for r in rows if r[chosen] != "research"]
    return {"accuracy": round(sum(r["route"] == r[chosen] for r in rows) / len(rows), 3),
            "confusion": dict(sorted(confusion.items())),
            "research_declined": sum(r["route"] == "research" for r in declined),
            "calls_saved": sum(RESEARCH_CALLS - (2 if r[chosen] == "general" else 1) for r in declined)}


def bench(config: Config, split: str) -> dict[str, Any]:
    from dspy_rag.models import build_lm
    from dspy_rag.pipelines.programs import build_program

    tenk = load_trainset("nvidia-10k")
    routed = config.model_copy(update={"roles": config.roles.model_copy(update={"router": True})})
    program = build_program("deep", routed, tenk.index(config), None)
    rows = []
    with dspy.context(lm=build_lm(config.lm), adapter=dspy.JSONAdapter()):
        for question in routing_questions(split):
            rows.append({**question, **route_one(program, question["question"])})
    return {"model": config.lm.model, "split": split, "questions": len(rows),
            "reranker": program.reranker.name if program.reranker else "none",
            "with_route_check": accuracy(rows, "guarded"), "without_route_check": accuracy(rows, "unguarded"),
            "median_route_seconds": round(statistics.median(r["seconds"] for r in rows), 2), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="dev", choices=("train", "dev", "all"))
    parser.add_argument("--model", default=None)
    parser.add_argument("--out", type=Path, default=RESULTS / "router.json")
    args = parser.parse_args()
    config = load_config(overrides={"lm.model": args.model})
    report = bench(config, args.split)
    write_json_atomic(args.out, report)
    for name in ("with_route_check", "without_route_check"):
        print(f"{name}: accuracy {report[name]['accuracy']:.3f}, research declined {report[name]['research_declined']}")


if __name__ == "__main__":
    main()
