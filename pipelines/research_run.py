"""One question's research as the deep program's roles share it: the LM calls and their budgets, the trajectory
being written, and the events shown as they happen."""

import copy
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from dspy_rag.pipelines.guards import Fired
from dspy_rag.pipelines.lm_calls import LMCalls
from dspy_rag.pipelines.trajectory import Trajectory

Events = Callable[[str, str], None]


@dataclass
class ResearchRun:
    trajectory: Trajectory
    calls: LMCalls
    on_event: Events

    def event(self, kind: str, text: str) -> None:
        self.on_event(kind, text)

    def note(self, notes: list[str], text: str) -> None:
        """Record what the program did other than the modules asked (a resolved step, a web fallback); show it."""
        notes.append(text)
        self.on_event("note", text)

    def guarded(self, fired: Fired, step: int | None = None) -> None:
        """Write a guard's firing into the trajectory, and show it as it happens."""
        self.trajectory.guards.append(asdict(replace(fired, step=step)))
        self.on_event("guard", f"{fired.guard}: {fired.changed} ({fired.why}); saw {fired.saw}")


class SharesTools:
    """A module whose tools (index, reranker, web, event sink) are shared by its copies: optimizers copy programs
    to tune their prompts, not their tools."""

    SHARED_TOOLS = frozenset({"retriever", "reranker", "web", "on_event"})

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        copied = self.__class__.__new__(self.__class__)
        memo[id(self)] = copied
        for name, value in self.__dict__.items():
            copied.__dict__[name] = value if name in self.SHARED_TOOLS else copy.deepcopy(value, memo)
        return copied
