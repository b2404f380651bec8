"""The teleprompters `dspy-rag compile` offers, with defaults sized for a 2-core machine, and what each costs.

Every optimizer gets the same metric; a teacher model, when given, writes the demos (and, for MIPROv2 and
GEPA, proposes the instructions) while the student is the model the artifact is compiled for.
"""

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dspy
from dspy.teleprompt import (GEPA, BootstrapFewShot, BootstrapFewShotWithRandomSearch, LabeledFewShot, MIPROv2,
                             Teleprompter)

from dspy_rag.errors import UserError
from dspy_rag.evals.research_metric import ResearchMetric
from dspy_rag.evals.plan_metric import PlanMetric
from dspy_rag.optimizers.demo_sampling import stratified_sample
from dspy_rag.optimizers.planner_instructions import PlannerInstructions

Build = Callable[[ResearchMetric, dict[str, Any], dspy.LM | None, dspy.LM], Any]
# A program's mean score on examples: how a searching teleprompter ranks its candidates.
Scorer = Callable[[dspy.Module, list[dspy.Example]], float]


# Measured on the dev sets (eval): the deep program with the LM policy makes 8-10 calls a question. A planner
# call is one of them: the planner optimizer's cost is given in runs of that many calls.
CALLS_PER_RUN = 9


@dataclass(frozen=True)
class Optimizer:
    name: str
    defaults: dict[str, Any]
    build: Build
    # What the optimizer's metric scores, in `unit`s, from the train and validation sizes and its settings (an
    # upper bound).
    scored: Callable[[int, int, dict[str, Any]], int]
    needs_valset: bool = False
    # Extra arguments to `compile` beyond student and trainset.
    compile_args: Callable[[dict[str, Any]], dict[str, Any]] = lambda settings: {}
    unit: str = "run"  # what one metric call scores: a whole program run, or a "plan" (one planner call)

    def runs(self, train: int, val: int, settings: dict[str, Any]) -> int:
        """What the optimizer scores, in program runs of CALLS_PER_RUN calls."""
        scored = self.scored(train, val, settings)
        return scored if self.unit == "run" else -(-scored // CALLS_PER_RUN)


def labels_all_outputs(example: dspy.Example, predictor: dspy.Predict) -> bool:
    """The example labels every output, and shows the passages when the predictor reads passages: an answer
    demo without them teaches answering from nothing."""
    needed = [*predictor.signature.output_fields, *(n for n in predictor.signature.input_fields if n == "passages")]
    return all(example.get(name) is not None for name in needed)


class LabeledPerModule(LabeledFewShot):
    """LabeledFewShot that gives each module only examples that label *all* its outputs: a gold plan for the
    planner, and nothing for modules the trainset does not label: a demo with an output missing shows the
    model "Not supplied for this particular example." in its place, which a small model then copies
    (docs/design/compile.md). Stratified, the demos cover the answer kinds and trainsets in turn (demo_sampling.py);
    else they are a plain seeded sample."""

    def __init__(self, k: int = 16, stratify: bool = True, seed: int = 0) -> None:
        super().__init__(k=k)
        self.stratify = stratify
        self.seed = seed

    def compile(self, student: dspy.Module, *, trainset: list[dspy.Example], sample: bool = True) -> dspy.Module:
        self.student = student.reset_copy()
        rng = random.Random(self.seed)
        for predictor in self.student.predictors():
            labeled = [e for e in trainset if labels_all_outputs(e, predictor)]
            predictor.demos = (stratified_sample(labeled, self.k, rng) if self.stratify
                               else rng.sample(labeled, min(self.k, len(labeled))))
        return self.student


class LabeledSearch(Teleprompter):
    """Several seeded draws of `LabeledPerModule` demos, each scored on the first `validation` examples of the
    validation split (the sets in turn, `PooledProgram.routed`) by `scorer` (compile's: through the run store), else
    `dspy.Evaluate`; the best-scoring draw is kept, ties going to the earlier seed. `candidates` lists each draw's
    seed and validation score."""

    def __init__(self, metric: ResearchMetric, k: int, stratify: bool, draws: int, validation: int) -> None:
        super().__init__()
        self.metric, self.k, self.stratify, self.draws, self.validation = metric, k, stratify, draws, validation
        self.candidates: list[dict[str, Any]] = []
        self.scorer: Scorer = self.evaluated

    def evaluated(self, program: dspy.Module, examples: list[dspy.Example]) -> float:
        return dspy.Evaluate(devset=examples, metric=self.metric, num_threads=1, display_progress=False,
                             max_errors=len(examples), provide_traceback=False)(program).score / 100

    def compile(self, student: dspy.Module, *, trainset: list[dspy.Example],
                valset: list[dspy.Example] | None = None) -> dspy.Module:
        if not valset:
            raise UserError("labeled-search scores its draws on validation questions kept aside from the train "
                            "split; give it a trainset with at least 4 train questions")
        best: tuple[float, dspy.Module] | None = None
        for seed in range(self.draws):
            program = LabeledPerModule(self.k, self.stratify, seed).compile(student, trainset=trainset)
            score = self.scorer(program, valset[:self.validation])
            self.candidates.append({"seed": seed, "validation": round(score, 4)})
            if best is None or score > best[0]:
                best = (score, program)
        assert best is not None, "draws is at least 1"
        return best[1]


def _teacher(teacher: dspy.LM | None) -> dict[str, Any]:
    return {"lm": teacher} if teacher is not None else {}


def _labeled(metric: ResearchMetric, s: dict[str, Any], teacher: dspy.LM | None, lm: dspy.LM) -> Any:
    return LabeledPerModule(k=s["k"], stratify=s["stratify"])


def _labeled_search(metric: ResearchMetric, s: dict[str, Any], teacher: dspy.LM | None, lm: dspy.LM) -> Any:
    return LabeledSearch(metric, s["k"], s["stratify"], max(1, s["draws"]), max(1, s["validation"]))


def _bootstrap(metric: ResearchMetric, s: dict[str, Any], teacher: dspy.LM | None, lm: dspy.LM) -> Any:
    return BootstrapFewShot(metric, teacher_settings=_teacher(teacher), max_bootstrapped_demos=s["demos"],
                            max_labeled_demos=s["labeled"], max_rounds=1, max_errors=s["max_errors"])


def _random_search(metric: ResearchMetric, s: dict[str, Any], teacher: dspy.LM | None, lm: dspy.LM) -> Any:
    return BootstrapFewShotWithRandomSearch(
        metric, teacher_settings=_teacher(teacher), max_bootstrapped_demos=s["demos"], max_labeled_demos=s["labeled"],
        num_candidate_programs=s["candidates"], num_threads=1, max_errors=s["max_errors"])


def _mipro(metric: ResearchMetric, s: dict[str, Any], teacher: dspy.LM | None, lm: dspy.LM) -> Any:
    return MIPROv2(metric, prompt_model=teacher or lm, task_model=lm, teacher_settings=_teacher(teacher), auto=None,
                   num_candidates=s["candidates"], max_bootstrapped_demos=s["demos"], max_labeled_demos=s["labeled"],
                   num_threads=1, max_errors=s["max_errors"], verbose=False, track_stats=False)


def _gepa(metric: ResearchMetric, s: dict[str, Any], teacher: dspy.LM | None, lm: dspy.LM) -> Any:
    return GEPA(metric, max_metric_calls=s["max_metric_calls"], reflection_lm=teacher or lm,
                reflection_minibatch_size=s["minibatch"], num_threads=1, track_stats=False, use_merge=False)


def _planner(metric: ResearchMetric, s: dict[str, Any], teacher: dspy.LM | None, lm: dspy.LM) -> Any:
    return PlannerInstructions(PlanMetric(metric.on_score), s["max_metric_calls"], s["minibatch"], teacher or lm)


OPTIMIZERS: dict[str, Optimizer] = {o.name: o for o in (
    Optimizer("labeled", {"k": 3, "stratify": True}, _labeled, lambda train, val, s: 0),
    Optimizer("labeled-search", {"k": 3, "stratify": True, "draws": 3, "validation": 24},
              _labeled_search, lambda train, val, s: s["draws"] * min(val, s["validation"]), needs_valset=True),
    Optimizer("bootstrap", {"demos": 2, "labeled": 0, "max_errors": 5}, _bootstrap,
              lambda train, val, s: train),
    Optimizer("random-search", {"demos": 2, "labeled": 0, "candidates": 2, "max_errors": 5}, _random_search,
              lambda train, val, s: (s["candidates"] + 1) * train + (s["candidates"] + 3) * val, needs_valset=True),
    Optimizer("mipro", {"demos": 2, "labeled": 0, "candidates": 3, "trials": 4, "minibatch": 4, "max_errors": 5},
              _mipro, lambda train, val, s: s["candidates"] * train + s["trials"] * s["minibatch"] + 2 * val,
              needs_valset=True,
              # Without the program's source in the proposer's prompt: with it, proposing asked the local
              # model for 4,361 tokens, over its 4,096-token window.
              compile_args=lambda s: {"num_trials": s["trials"], "minibatch_size": s["minibatch"],
                                      "minibatch_full_eval_steps": s["trials"], "program_aware_proposer": False}),
    Optimizer("gepa", {"max_metric_calls": 24, "minibatch": 2}, _gepa,
              lambda train, val, s: s["max_metric_calls"], needs_valset=True),
    Optimizer("planner", {"max_metric_calls": 160, "minibatch": 3}, _planner,
              lambda train, val, s: s["max_metric_calls"], needs_valset=True, unit="plan"),
)}


def optimizer_settings(optimizer: Optimizer, overrides: dict[str, Any]) -> dict[str, Any]:
    """The optimizer's settings with the overrides, each of its default's type (a count stays a whole number)."""
    if unknown := set(overrides) - set(optimizer.defaults):
        raise UserError(f"{optimizer.name} has no setting {', '.join(sorted(unknown))}; choose from "
                        f"{', '.join(sorted(optimizer.defaults))}")
    checked = {}
    for name, value in overrides.items():
        kind = type(optimizer.defaults[name])
        if kind is bool:
            checked[name] = switch(optimizer, name, value)
            continue
        if not isinstance(value, kind) or isinstance(value, bool) or (isinstance(value, int | float) and value < 0):
            raise UserError(f"{optimizer.name}'s setting {name} takes a non-negative {kind.__name__}, e.g. "
                            f"{name}={optimizer.defaults[name]}; got {value!r:.40}")
        checked[name] = value
    return {**optimizer.defaults, **checked}


def switch(optimizer: Optimizer, name: str, value: Any) -> bool:
    """An on/off setting as `--set` gives it (`stratify=false`) or as a bool."""
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):
        return str(value).lower() == "true"
    raise UserError(f"{optimizer.name}'s setting {name} takes true or false, e.g. {name}=false; got {value!r:.40}")
