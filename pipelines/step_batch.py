"""Plan steps researched at once. A served LM takes several requests in flight, so the plan's steps that build on
no earlier step's answer need not wait for each other; the embedded local model answers one request at a time,
and there they run one by one (a batch of one).

A batch is the plan's next step and the independent steps after it, up to the configured limit. Its steps run in
threads, each in a copy of the DSPy context (the LM and adapter in force). Their events are passed on in plan
order (the earliest unfinished step's as they happen, a later one's once every step before it is done), and
their LM calls and guard firings are put back in plan order when the batch ends: the trajectory reads as if the
steps ran one by one."""

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from dataclasses import replace
from typing import TypeVar

from dspy_rag.pipelines.research_run import Events, ResearchRun
from dspy_rag.signatures import Step

Result = TypeVar("Result")


def batch_size(steps: Sequence[Step], limit: int) -> int:
    """How many of the plan's next steps run at once: the first, and those after it that build on no earlier
    step's answer, at most `limit`."""
    size = 1
    while size < min(limit, len(steps)) and not steps[size].builds_on_earlier():
        size += 1
    return size


class InPlanOrder:
    """The events of steps researched at once, passed on in plan order: the earliest unfinished step's as they
    happen, each later step's held until every step before it is done."""

    def __init__(self, sink: Events, count: int) -> None:
        self.sink = sink
        self.held: list[list[tuple[str, str]]] = [[] for _ in range(count)]
        self.done = [False] * count
        self.head = 0  # the step whose events go straight through
        self.lock = threading.Lock()

    def of(self, position: int) -> Events:
        def event(kind: str, text: str) -> None:
            with self.lock:
                if position == self.head:
                    self.sink(kind, text)
                else:
                    self.held[position].append((kind, text))

        return event

    def finished(self, position: int) -> None:
        with self.lock:
            self.done[position] = True
            while self.head < len(self.done) and self.done[self.head]:
                self.head += 1
                if self.head < len(self.held):
                    for kind, text in self.held[self.head]:
                        self.sink(kind, text)
                    self.held[self.head].clear()


def researched_at_once(research: Callable[[int, ResearchRun], Result], count: int, run: ResearchRun
                       ) -> tuple[list[Result], BaseException | None]:
    """The results of `research(position, run)` for each step of a batch, in plan order up to the first step
    that raised, and what it raised (None when every step finished)."""
    if count == 1:
        try:
            return [research(0, run)], None
        except Exception as exc:  # the caller keeps what finished, then raises it
            return [], exc
    order = InPlanOrder(run.on_event, count)
    first, calls, guards = len(run.trajectory.steps), len(run.calls.records), len(run.trajectory.guards)

    def one(position: int) -> Result:
        try:
            return research(position, replace(run, on_event=order.of(position)))
        finally:
            order.finished(position)

    pool = ThreadPoolExecutor(max_workers=count, thread_name_prefix="step")
    try:
        # One context copy per thread: a context cannot be entered by two threads at once.
        futures = [pool.submit(copy_context().run, one, position) for position in range(count)]
        errors = [future.exception() for future in futures]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # Ctrl-C while waiting does not wait for the steps
    # Every step has finished: nothing appends to these lists any more.
    run.calls.records[calls:] = sorted(run.calls.records[calls:], key=lambda c: c.step or 0)
    run.trajectory.guards[guards:] = sorted(run.trajectory.guards[guards:], key=lambda g: g["step"] or 0)
    stop = next((n for n, error in enumerate(errors) if error is not None), count)
    for later in range(stop + 1, count):
        if errors[later] is None:
            run.note(run.trajectory.notes, f"step {first + later + 1} was researched but not kept: step "
                                           f"{first + stop + 1} before it stopped, and steps are kept in plan order")
    return [future.result() for future in futures[:stop]], errors[stop] if stop < count else None
