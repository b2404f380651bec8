"""The consoles every command prints to, and the reporter that shows a run's progress on stderr. Rich markup is
off, so no user string (a path, a file name, a question, a passage) is ever read as markup: "[draft] notes.md"
prints as written, and "[/i]" in a path cannot break a command after its work is done. Styling is explicit, with
`Text`."""

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console, RenderableType
from rich.live import Live
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

# soft_wrap: piped output keeps its long lines instead of being hard-wrapped at 80 columns.
out = Console(soft_wrap=True, markup=False, highlight=False)
err = Console(stderr=True, soft_wrap=True, markup=False, highlight=False)


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line of plain text and (text, style) pieces; nothing in it is read as markup."""
    return Text.assemble(*parts)


def progress(message: str, kind: str | None = None) -> None:
    """One progress line on stderr: "› message", or "› kind message" with the kind in bold."""
    err.print(styled(("› ", "dim"), *([(kind, "bold"), " "] if kind else []), message))


class AnswerDraft:
    """The short answer on the terminal as the model writes it: one line, which the command's output replaces."""

    def __init__(self) -> None:
        self.text = ""
        # Nothing else goes through this display: progress lines stay on stderr.
        self.live = Live(console=out, transient=True, auto_refresh=False, redirect_stdout=False, redirect_stderr=False)

    def hear(self, piece: str) -> None:
        self.text += piece
        self.live.start()
        self.live.update(styled(("Answer:", "bold"), f" {self.text}"), refresh=True)

    def __enter__(self) -> "AnswerDraft":
        return self

    def __exit__(self, *_: object) -> None:
        self.live.stop()


def print_whole(table: RenderableType) -> None:
    """A table on stdout at its natural width, even when piped or the terminal is narrower: a score cut to "0…"
    is worse than a wrapped line, and Console.print never goes past the console's width."""
    natural = Measurement.get(out, out.options.update_width(sys.maxsize), table).maximum
    Console(width=max(out.width, natural), markup=False).print(table)


def bar_display(transient: bool = False, disable: bool = False) -> Progress:
    """Progress bars on stderr: what is being done, the bar, done of total, time taken and the time left at the
    pace so far (a file's embedding takes minutes); `transient` ones vanish when the block ends."""
    return Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=transient, disable=disable)


class StageBar:
    """An ingest's `ProgressFn` on one bar. Each stage (reading a file, embedding its chunks, committing them) is a
    task of its own, so the time left is estimated from that stage's own pace, never from another stage's counts."""

    def __init__(self, display: Progress) -> None:
        self.display = display
        self.stage = "starting"
        self.task = display.add_task(self.stage, total=None)

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage == self.stage:
            self.display.update(self.task, completed=done, total=total or None)
            return
        self.display.remove_task(self.task)
        self.stage, self.task = stage, self.display.add_task(stage, total=total or None, completed=done)


class PhaseBars:
    """`reporter.Bars` drawn by rich; a log file (stderr not a terminal) gets each item's note as a progress line."""

    def __init__(self, display: Progress) -> None:
        self.display = display
        self.task: TaskID | None = None

    def start(self, label: str, total: int | None) -> None:
        if self.task is not None:
            self.display.update(self.task, visible=False)
        self.task = self.display.add_task(label, total=total)

    def advance(self, note: str) -> None:
        if self.task is not None:
            self.display.advance(self.task)
        if not err.is_terminal:
            progress(note)


class StderrReporter:
    """`reporter.Reporter` on stderr: progress lines, figures as written, and bars."""

    def say(self, message: str, kind: str | None = None) -> None:
        progress(message, kind)

    def line(self, text: str) -> None:
        err.print(text)

    @contextmanager
    def bars(self) -> Iterator[PhaseBars]:
        with bar_display() as display:
            yield PhaseBars(display)


STDERR = StderrReporter()
