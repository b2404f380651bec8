"""How a long run (a compile, an eval, a distillation) tells its user what it is doing, without knowing how that
is shown: the command line draws it on stderr, a library caller hears nothing unless it passes a reporter."""

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol


class Bars(Protocol):
    """The progress bars of a run's phases, one phase at a time."""

    def start(self, label: str, total: int | None) -> None:
        """A bar for the next phase, of `total` items (None: not known); the previous phase's bar is put away."""

    def advance(self, note: str) -> None:
        """One item of the phase done; `note` says which, for a display that draws no bar (a log file)."""


class Reporter(Protocol):
    """Where a run's progress goes."""

    def say(self, message: str, kind: str | None = None) -> None:
        """A progress line: what the run does now; `kind` names the step it belongs to."""

    def line(self, text: str) -> None:
        """A line of figures as they come in, or a warning, shown as written."""

    def bars(self) -> AbstractContextManager[Bars]:
        """Progress bars for the phases run inside the block."""


class Quiet:
    """A reporter that shows nothing: the default of every run."""

    def say(self, message: str, kind: str | None = None) -> None:
        pass

    def line(self, text: str) -> None:
        pass

    @contextmanager
    def bars(self) -> Iterator[Bars]:
        yield self

    def start(self, label: str, total: int | None) -> None:
        pass

    def advance(self, note: str) -> None:
        pass


QUIET = Quiet()
