"""The `planner` optimizer: GEPA on the planner's instruction alone. Each candidate instruction is scored by one
planner call a train question against the question's gold plan (evals/plan_metric.py), not by a whole research
run, and the reflection model (the teacher, else the model) rewrites the instruction from the plans it wrote and
the metric's feedback. The planner's demos and every other predictor stay as the student has them, so with
`--parent` it refines a compiled program's planner."""

import dspy
from dspy.teleprompt import GEPA, Teleprompter

from dspy_rag.errors import UserError
from dspy_rag.evals.plan_metric import PlanMetric, PlannerAlone, with_gold_plans
from dspy_rag.optimizers.pool import PooledProgram


class PlannerInstructions(Teleprompter):
    """GEPA over `PlannerAlone`, its best instruction then set on the student's planner. `candidates` lists the
    instructions GEPA kept, each with its validation score."""

    def __init__(self, metric: PlanMetric, max_metric_calls: int, minibatch: int,
                 reflection_lm: dspy.LM) -> None:
        super().__init__()
        self.metric, self.max_metric_calls, self.minibatch = metric, max_metric_calls, minibatch
        self.reflection_lm = reflection_lm
        self.candidates: list[dict[str, object]] = []

    def compile(self, student: dspy.Module, *, trainset: list[dspy.Example],
                valset: list[dspy.Example] | None = None) -> dspy.Module:
        train, val = with_gold_plans(trainset), with_gold_plans(valset or [])
        if not train or not val:
            raise UserError("the planner optimizer scores plans against gold plans, and found "
                            f"{len(train)} train and {len(val)} validation questions with one; compile on a "
                            "trainset whose questions carry plans (musique, nvidia-10k)")
        programs = (student.programs if isinstance(student, PooledProgram)
                    else dict.fromkeys({e.trainset for e in train + val}, student))
        planning = PlannerAlone(programs)
        gepa = GEPA(self.metric, max_metric_calls=self.max_metric_calls, reflection_lm=self.reflection_lm,
                    reflection_minibatch_size=self.minibatch, num_threads=1, track_stats=True, use_merge=False)
        best = gepa.compile(planning, trainset=train, valset=val)
        results = best.detailed_results
        self.candidates = [{"instruction": instruction(candidate), "validation": round(score, 4)}
                           for candidate, score in zip(results.candidates, results.val_aggregate_scores, strict=True)]
        program = student.deepcopy()
        first = program.first() if isinstance(program, PooledProgram) else program
        predictor = first.planner.predict
        predictor.signature = predictor.signature.with_instructions(instruction(best))
        return program


def instruction(planning: PlannerAlone) -> str:
    """The planner's instruction as `planning` holds it."""
    return planning.planner.predict.signature.instructions
