"""Answer runs through the run store (`dspy_rag.run_store`): a program's scored answer to a question, the row
eval shows and compile's dev split scores, taken from the store when the same run was made before."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from dspy_rag.evals.ragas_bridge import inputs_of
from dspy_rag.evals.rows import Row, run_question, score
from dspy_rag.run_store import RunContext, RunStore
from dspy_rag.trainsets.formats import Question

if TYPE_CHECKING:
    import dspy

ANSWER = "answer"  # the kind of run: a program's answer to one question


@dataclass
class StoredRun:
    row: Row
    trajectory: dict[str, Any] | None  # the deep program's; the other programs keep none
    reused: bool  # taken from the store, not run now
    prediction: dspy.Prediction | None = None  # the program's, when it ran now


class AnswerRuns:
    """The answer runs of one program (the run context) on one set, under any label the caller shows them by.
    Take 2, 3 ... are repeat measurements of the same runs, kept apart from the first and from each other."""

    def __init__(self, store: RunStore, context: RunContext, take: int = 1) -> None:
        self.store, self.context, self.take = store, context, take

    def key(self, question: Question) -> str:
        # The gold is keyed too: the stored row holds scores against it. Take 1 keeps the key it always had.
        gold: list[Any] = [question.answer, question.aliases, question.gold_passages, question.gold_sections]
        return self.context.key(ANSWER, question.question, gold if self.take == 1 else [*gold, {"take": self.take}])

    def stored(self, label: str, question: Question) -> StoredRun | None:
        """The run made before, under this set's name, label and question id; None when there is none, when it
        lacks the inputs its ragas scores are computed from, or when it is not a run this code stores."""
        found = self.store.get(self.key(question))
        stored = found.get("row") if isinstance(found, dict) else None
        if not isinstance(stored, dict) or not stored.get("ragas_inputs"):
            return None
        try:
            row = Row(**{**stored, "set": self.context.set_name, "pipeline": label, "id": question.id})
        except TypeError:  # not a row this code writes (an imported file's): the question is run again
            return None
        return StoredRun(row, found.get("trajectory"), reused=True)

    def run(self, program: dspy.Module, label: str, question: Question) -> StoredRun:
        """Run the program on the question now, and store the run before returning it."""
        prediction, usage = run_question(program, question)
        row = replace(score(self.context.set_name, label, question, prediction, usage),
                      ragas_inputs=asdict(inputs_of(question, prediction)))
        trajectory = getattr(prediction, "trajectory", None)
        made = StoredRun(row, trajectory.to_json() if trajectory is not None else None, False, prediction)
        self.keep(question, made)
        return made

    def keep(self, question: Question, run: StoredRun) -> None:
        """Store the run (again, when its row gained scores such as ragas')."""
        self.store.put(self.key(question), self.context, ANSWER, question.id,
                       {"row": asdict(run.row), "trajectory": run.trajectory})
