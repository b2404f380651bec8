"""Plans against gold plans on the dev questions of sets that carry them (MuSiQue): how a model, with an
artifact's planner prompt or the uncompiled one, decomposes questions. One planner call a question, no research
run; one JSON line a configuration, appended to `--out`, with each question's score for pairing (by SET:ID when
several sets are scored). A configuration already in `--out` is not planned again.

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
from dspy_rag.evals.plan_metric import PlannerAlone, gold_plan, match, with_gold_plans
from dspy_rag.evals.research_metric import example_of
from dspy_rag.ledger import append_line
from dspy_rag.models import build_lm
from dspy_rag.paths import output_file, shown
from dspy_rag.pipelines.programs import program_for
from dspy_rag.trainsets.registry import load_trainsets


def plan_scores(trainsets: str, model: str, artifact: str) -> dict[str, object]:
    """`model` planning with `artifact`'s planner prompt: its plans' scores against the gold plans."""
    config = load_config(overrides={"lm.model": model})
    # The model under test plans: a configured planner model would plan in its place.
    config = config.model_copy(update={"lm": config.lm.model_copy(update={"planner_model": None})})
    sets = load_trainsets(trainsets)
    examples = with_gold_plans([example_of(q).copy(trainset=s.name) for s in sets for q in s.questions("dev")])
    if not examples:
        raise UserError(f"no dev question of {trainsets} has a gold plan; try musique")
    dspy.configure(lm=build_lm(config.lm), adapter=dspy.JSONAdapter())
    planner = PlannerAlone({s.name: program_for("deep", config, s.index(config), s.web(config), artifact=artifact)
                            for s in sets})
    key = (lambda e: e.id) if len(sets) == 1 else (lambda e: f"{e.trainset}:{e.id}")
    started = time.perf_counter()
    matches = {key(e): match(list(planner(question=e.question, trainset=e.trainset).steps), gold_plan(e))
               for e in examples}
    results = list(matches.values())
    return {**configuration(trainsets, model, artifact), "questions": len(results),
            "score": round(mean(r.score for r in results), 4),
            "coverage": round(mean(r.coverage for r in results), 4),
            "distinct_steps": round(mean(r.distinct for r in results), 3),
            "written_steps": round(mean(r.written for r in results), 3),
            "gold_steps": round(mean(r.gold for r in results), 3),
            "one_step_share": round(mean(r.distinct == 1 for r in results), 3),
            "seconds_per_plan": round((time.perf_counter() - started) / len(results), 1),
            "scores": {id_: round(r.score, 4) for id_, r in matches.items()}}


def configuration(trainsets: str, model: str, artifact: str) -> dict[str, str]:
    return {"trainsets": trainsets, "model": model, "artifact": artifact}


def scored_before(out: Path, wanted: dict[str, str]) -> bool:
    """`out` has a line for this configuration (torn lines skipped)."""
    try:
        lines = out.read_bytes().decode("utf-8", "replace").splitlines()  # a line torn mid-character
    except FileNotFoundError:
        return False
    for line in lines:
        try:
            if {k: json.loads(line).get(k) for k in wanted} == wanted:
                return True
        except (json.JSONDecodeError, AttributeError):
            continue
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainset", default="musique")
    parser.add_argument("--model", required=True)
    parser.add_argument("--artifact", default="none")
    parser.add_argument("--out", type=Path)
    given = parser.parse_args()
    wanted = configuration(given.trainset, given.model, given.artifact)
    if given.out:
        output_file(given.out, "--out")
        if scored_before(given.out, wanted):
            print(f"{shown(given.out)} already scores {json.dumps(wanted)}; nothing to do")
            return
    result = plan_scores(given.trainset, given.model, given.artifact)
    print(json.dumps(result))
    if given.out:
        append_line(given.out, result)


if __name__ == "__main__":
    main()
