"""The trainsets one compile is fit on: their train splits pooled for the optimizer and their dev splits for the
score, each question tagged with its own set, so each of its runs retrieves from that set's index and web snapshot."""

from collections.abc import Sequence
from functools import reduce
from itertools import zip_longest
from typing import TypeVar

import dspy

from dspy_rag import artifacts
from dspy_rag.config import Config
from dspy_rag.errors import UserError
from dspy_rag.evals.research_metric import example_of
from dspy_rag.index import Index
from dspy_rag.pipelines.programs import build_program
from dspy_rag.trainsets.registry import SEPARATOR, Part, Trainset, load_trainsets, pooled_hash
from dspy_rag.web import WebSearch

T = TypeVar("T")


def in_turn(groups: list[list[T]]) -> list[T]:
    """The groups' items taken one from each in turn (a, b, a, b, a ...), so a cut-off keeps every group."""
    return [item for row in zip_longest(*groups) for item in row if item is not None]


class Pool:
    """One trainset, or several whose splits are pooled."""

    def __init__(self, sets: Sequence[Trainset]) -> None:
        self.sets = list(sets)
        self._by_name = {s.name: s for s in sets}

    @classmethod
    def load(cls, given: str | Sequence[str]) -> "Pool":
        return cls(load_trainsets(given))

    @property
    def name(self) -> str:
        return SEPARATOR.join(s.name for s in self.sets)

    @property
    def content_hash(self) -> str:
        return pooled_hash(self.sets)

    def record(self) -> list[dict[str, str]]:
        """Every set by name and content hash, for the artifact's manifest."""
        return [{"name": s.name, "hash": s.content_hash} for s in self.sets]

    def examples(self, part: Part, limit: int | None) -> list[dspy.Example]:
        """The first `limit` questions of each set's split, its sets in turn, each example tagged with its set."""
        examples = []
        for trainset in self.sets:
            questions = trainset.questions(part)[:limit]
            if not questions:
                raise UserError(f"trainset {trainset.name} has no {part} questions; give it train and dev questions")
            examples += [example_of(q).copy(trainset=trainset.name) for q in questions]
        return examples

    def member(self, name: str) -> Trainset:
        return self._by_name[name]

    def key(self, example: dspy.Example) -> str:
        """The example's id in the manifest's dev scores: SET:ID when pooled, as ids of two sets may coincide."""
        return example.id if len(self.sets) == 1 else f"{example.trainset}:{example.id}"


class SetPrograms:
    """The program bound to each set's index and web: the compiled one for its first set, and for every other a
    program of its own carrying the same prompts and demos."""

    def __init__(self, config: Config, tools: dict[str, tuple[Index, WebSearch | None]]) -> None:
        self.config, self.tools = config, tools
        self.first, *others = tools
        self.webs = {name: web for name, (_index, web) in tools.items()}
        self.programs = {name: build_program("deep", config, *tools[name]) for name in others}

    def pooled(self, program: dspy.Module) -> "PooledProgram":
        """`program` (built on the first set's tools) with a program of its own on every other set, sharing its
        predictors: what an optimizer runs on the pooled train questions."""
        # New programs, not self.programs: PooledProgram swaps their predictors for the shared ones, and the dev
        # runs load each candidate's state into self.programs.
        others = {name: build_program("deep", self.config, *self.tools[name]) for name in self.programs}
        return PooledProgram({self.first: program, **others})

    def bound(self, program: dspy.Module, trainset: str) -> dspy.Module:
        """`program` (built on the first set's tools) as it runs on `trainset`'s."""
        if trainset == self.first:
            return program
        other = self.programs[trainset]
        other.load_state(artifacts.dspy_state(program))
        return other


class PooledProgram(dspy.Module):
    """The program an optimizer runs on several sets' train questions: one program per set, bound to that set's
    index and web, all sharing the first one's predictors, so whatever the optimizer sets (demos, instructions)
    is the same prompt on every set. A question is researched on its own set's tools (its `trainset` input)."""

    def __init__(self, programs: dict[str, dspy.Module]) -> None:
        super().__init__()
        first, *others = programs.values()
        for other in others:
            for name, predictor in first.named_predictors():
                owner, _, attribute = name.rpartition(".")
                setattr(reduce(getattr, owner.split("."), other) if owner else other, attribute, predictor)
        self.programs = programs

    def forward(self, question: str, trainset: str) -> dspy.Prediction:
        return self.programs[trainset](question=question)

    def first(self) -> dspy.Module:
        """The first set's program: the one the artifact saves."""
        return next(iter(self.programs.values()))

    @staticmethod
    def routed(examples: list[dspy.Example]) -> list[dspy.Example]:
        """The examples with their set as an input, so the optimizer passes it to `forward`, the sets in turn: an
        optimizer that walks its train questions in order and stops once it has its demos (BootstrapFewShot) then
        learns from every set, not from the first alone."""
        by_set: dict[str, list[dspy.Example]] = {}
        for example in examples:
            by_set.setdefault(example.trainset, []).append(example.with_inputs(*example.inputs().keys(), "trainset"))
        return in_turn(list(by_set.values()))
