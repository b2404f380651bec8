"""The `planner` optimizer: GEPA on the planner's instruction alone. Each candidate instruction is scored by one
planner call a train question against the question's gold plan (evals/plan_metric.py), not by a whole research
run, and the reflection model (the teacher, else the model) rewrites the instruction from the plans it wrote and
the metric's feedback. The planner's demos and every other predictor stay as the student has them, so with
`--parent` it refines a compiled program's planner."""

import dspy
from dspy.teleprompt import GEPA, Teleprompter

from dspy_rag.errors import UserError
from dspy_rag.evals.plan_metric import PlanMetric
from dspy_rag.optimizers.pool import PooledProgram
from dspy_rag.pipelines.lm_calls import LMCalls
from dspy_rag.pipelines.planner import Planner
from dspy_rag.pipelines.research_run import ResearchRun
from dspy_rag.pipelines.trajectory import Trajectory

class Planning(dspy.Module):
    """The program's planner on its own, given what the research gives it at the start on the question's set: the
    set's section titles, whether the web is on, no findings. Its plan comes back as the planner wrote it, repeats
    and all (the metric counts them), after the planner's other guards."""

    def __init__(self, student: dspy.Module, trainsets: set[str]) -> None:
        super().__init__()
        programs = student.programs if isinstance(student, PooledProgram) else dict.fromkeys(trainsets, student)
        first = next(iter(programs.values()))
        self.planner = Planner(first.planner.guards.model_copy(update={"repeated_step": False}))
        self.planner.predict.load_state(first.planner.predict.dump_state())
        self.budgets = first.budgets
        self.tools = {name: (p.retriever.index.section_titles, p.web is not None) for name, p in programs.items()}

    def forward(self, question: str, trainset: str) -> dspy.Prediction:
        sections, web_available = self.tools[trainset]
        record = Trajectory(question, "plan", "none", "on" if web_available else "off")
        run = ResearchRun(record, LMCalls(self.budgets, record.calls), lambda kind, text: None)
        return self.planner(question=question, sections=sections, web_available=web_available, findings=[], run=run)


def with_gold_plans(examples: list[dspy.Example]) -> list[dspy.Example]:
    return [dspy.Example(id=e.id, question=e.question, trainset=e.trainset, steps=e.steps).with_inputs("question", "trainset")
            for e in examples if e.get("steps")]


class PlannerInstructions(Teleprompter):
    """GEPA over `Planning`, its best instruction then set on the student's planner. `candidates` lists the
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
        planning = Planning(student, {e.trainset for e in train + val})
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


def instruction(planning: Planning) -> str:
    return planning.planner.predict.signature.instructions
