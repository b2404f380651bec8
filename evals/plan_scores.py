"""Plans against gold plans on the dev questions of sets that carry them (MuSiQue): how a model, with an
artifact's planner prompt or the uncompiled one, decomposes questions. One planner call a question, no research
run; one JSON line a configuration, appended to `--out`, with each question's score for pairing.

    python -m dspy_rag.evals.plan_scores --trainset musique --model local/qwen2.5-coder-1.5b --artifact none \
        --out evals/results/plan-scores.jsonl
"""

import argparse
import json
import time
from pathlib import Path
from statistics import mean

import dspy

from dspy_rag.config import load_config
from dspy_rag.errors import UserError
from dspy_rag.evals.plan_metric import Planning, gold_plan, match, with_gold_plans
from dspy_rag.evals.research_metric import example_of
from dspy_rag.models import build_lm
from dspy_rag.pipelines.programs import program_for
from dspy_rag.trainsets.registry import load_trainsets


def plan_scores(trainsets: str, model: str, artifact: str) -> dict[str, object]:
    config = load_config(overrides={"lm.model": model})
    sets = load_trainsets(trainsets)
    examples = with_gold_plans([example_of(q).copy(trainset=s.name) for s in sets for q in s.questions("dev")])
    if not examples:
        raise UserError(f"no dev question of {trainsets} has a gold plan; try musique")
    dspy.configure(lm=build_lm(config.lm), adapter=dspy.JSONAdapter())
    planning = Planning({s.name: program_for("deep", config, s.index(config), s.web(config), artifact=artifact)
                         for s in sets})
    started = time.perf_counter()
    matches = {e.id: match(list(planning(question=e.question, trainset=e.trainset).steps), gold_plan(e))
               for e in examples}
    results = list(matches.values())
    return {"trainsets": trainsets, "model": model, "artifact": artifact, "questions": len(results),
            "score": round(mean(r.score for r in results), 4),
            "coverage": round(mean(r.coverage for r in results), 4),
            "distinct_steps": round(mean(r.distinct for r in results), 3),
            "written_steps": round(mean(r.written for r in results), 3),
            "gold_steps": round(mean(r.gold for r in results), 3),
            "one_step_share": round(mean(r.distinct == 1 for r in results), 3),
            "seconds_per_plan": round((time.perf_counter() - started) / len(results), 1),
            "scores": {id_: round(r.score, 4) for id_, r in matches.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainset", default="musique")
    parser.add_argument("--model", required=True)
    parser.add_argument("--artifact", default="none")
    parser.add_argument("--out", type=Path)
    given = parser.parse_args()
    line = json.dumps(plan_scores(given.trainset, given.model, given.artifact))
    print(line)
    if given.out:
        with given.out.open("a") as out:
            out.write(line + "\n")


if __name__ == "__main__":
    main()
