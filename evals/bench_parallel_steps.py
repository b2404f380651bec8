"""Steps at once: a three-step question over the 10-K, timed one step at a time and all three steps at once.

Its three sub-questions are independent; the runs differ only in `lm.parallel_steps` (1, then 3), against a
served model.

    .venv/bin/python -m dspy_rag.evals.bench_parallel_steps --api-base http://127.0.0.1:8000/v1 [--model openai/qwen]
        [--runs 2] [--out evals/results/parallel-steps.json]

Serve the local 0.5B first with llama.cpp's OpenAI-compatible server, e.g.
`python -m llama_cpp.server --model "$(python -c 'from dspy_rag.models import ensure_local_model, lookup;
print(ensure_local_model(lookup("local/qwen2.5-coder-0.5b")))')" --model_alias qwen --port 8000 --n_threads 2
--n_ctx 4096`. llama-cpp-python's server answers one request at a time (it has no parallel slots), so there the
steps' requests queue and the runs differ by what overlaps outside the model; a server with slots (llama.cpp's
own `llama-server -np 3`, vLLM) decodes them together.

The plan is fixed (the planner's predictor stands in with the three steps, no LM call), and the policy follows
the plan, so both modes research the same three steps and make the same calls. The modes take turns, `--runs`
times each; the report gives each run's seconds, LM calls and summed call seconds (above the wall time when calls
overlapped), the medians and the speed-up.
"""

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import dspy

from dspy_rag.config import Config, load_config
from dspy_rag.evals.rows import RESULTS
from dspy_rag.files import write_json_atomic
from dspy_rag.index import Index
from dspy_rag.signatures import Step

QUESTION = "What were NVIDIA's Data Center, Gaming and Automotive revenues in fiscal year 2023?"
STEPS = [Step(sub_question=f"What was NVIDIA's {segment} revenue in fiscal year 2023?", tool="search_docs",
              keywords=[f"{segment} revenue"], justification="one segment")
         for segment in ("Data Center", "Gaming", "Automotive")]
MODES = {"sequential": 1, "parallel": len(STEPS)}


class FixedPlan:
    """Stands in for the planner's predictor: the same steps every time, without an LM call."""

    def __call__(self, **_inputs: Any) -> dspy.Prediction:
        return dspy.Prediction(steps=list(STEPS))


def research_once(config: Config, index: Index, parallel_steps: int, lm: dspy.LM) -> dict[str, Any]:
    """One run of the question with `parallel_steps`, and what it cost."""
    from dspy_rag.pipelines.programs import build_program

    settings = config.model_copy(update={"lm": config.lm.model_copy(update={"parallel_steps": parallel_steps})})
    program = build_program("deep", settings, index, None, policy="plan")
    program.planner.predict = FixedPlan()
    started = time.perf_counter()
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        prediction = program(question=QUESTION)
    record = prediction.trajectory
    return {"seconds": round(time.perf_counter() - started, 2), "lm_calls": record.lm_calls,
            "lm_seconds": round(record.lm_seconds, 2), "steps": len(record.steps),
            "parallel_steps": record.parallel_steps, "short_answer": prediction.short_answer,
            "stopped_early": record.stopped_early, "trajectory": record.to_json()}


def bench(config: Config, index: Index, runs: int) -> dict[str, Any]:
    from dspy_rag.models import build_lm

    lm = build_lm(config.lm)
    done: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for _ in range(runs):
        for mode, parallel_steps in MODES.items():
            done[mode].append(research_once(config, index, parallel_steps, lm))
    medians = {mode: statistics.median(r["seconds"] for r in rows) for mode, rows in done.items()}
    return {"model": config.lm.model, "api_base": config.lm.api_base, "question": QUESTION,
            "steps": [s.sub_question for s in STEPS], "runs": runs, "median_seconds": medians,
            "speedup": round(medians["sequential"] / medians["parallel"], 3) if medians["parallel"] else None,
            "rows": done}


def main() -> None:
    from dspy_rag.trainsets.registry import load_trainset

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api-base", required=True, help="the served model's OpenAI-compatible base URL")
    parser.add_argument("--model", default="openai/qwen", help="its LiteLLM model string")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS / "parallel-steps.json")
    args = parser.parse_args()
    config = load_config(overrides={"lm.model": args.model, "lm.api_base": args.api_base})
    # the configured key is its provider's, not this server's
    config = config.model_copy(update={"lm": config.lm.model_copy(update={"api_key": None})})
    report = bench(config, load_trainset("nvidia-10k").index(config), args.runs)
    write_json_atomic(args.out, report)
    print(f"median seconds {report['median_seconds']}, speed-up {report['speedup']}")


if __name__ == "__main__":
    main()
