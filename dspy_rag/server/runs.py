"""The research runs the server carries out: each waits its turn in the line, runs in a worker thread (one for the
embedded model, up to serve.parallel for a served one), and streams its steps to its client as they happen, ending
with the document `ask --json` prints. A client that goes away cancels its run at the next step; the finished deep
runs' trajectories are kept for a while."""

import asyncio
import dataclasses
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from dspy_rag.api import Research, Say
from dspy_rag.config import Config
from dspy_rag.errors import UserError, one_line, redact
from dspy_rag.server.bodies import ResearchBody
from dspy_rag.server.line import Line, Ticket

log = logging.getLogger("dspy_rag.server")
Event = tuple[str, Any]  # (kind, data): a research step's kind and text, or queued, token, answer, error


class Cancelled(Exception):
    """The client went away: its run stops at the next step."""


class RunFailed(Exception):
    """The research failed once under way: the model or a service behind it, not the request (502)."""


def reason(exc: BaseException) -> str:
    """An exception as the one line a client may read: secrets masked, no traceback."""
    return one_line(redact(str(exc) or type(exc).__name__))


@dataclass(eq=False)
class Run:
    """One request's research: its id, its ticket in the line and the events its client reads."""

    ticket: Ticket
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    events: asyncio.Queue[Event | None] = field(default_factory=asyncio.Queue)  # None: no more
    cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self.cancelled.set()
        self.ticket.moved.set()  # a waiting run wakes to leave the line

    async def stream(self) -> AsyncIterator[Event]:
        """The run's events as they come, until its last."""
        while (event := await self.events.get()) is not None:
            yield event


OPENED = 8  # programs kept open, by the options that build them


class Runs:
    """The line, the model's worker thread, the programs opened and the finished trajectories of one server."""

    def __init__(self, settings: Config, lm: Any, line: Line) -> None:
        self.settings = settings
        self.lm = lm
        self.line = line
        self.worker = ThreadPoolExecutor(max_workers=line.parallel, thread_name_prefix="research")
        self.trajectories: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.carried: set[asyncio.Task[None]] = set()  # held so the loop does not drop a running task
        # Opening a program loads its index, reranker and artifact, too slow for every request: each is opened
        # once, kept, and shared by the runs with its options. Its steps go to the run whose thread took them,
        # through `hearing` (set in each run's thread, and carried into any thread the run starts).
        self.opened: OrderedDict[str, Research] = OrderedDict()
        self.opening = threading.Lock()  # the worker threads open and evict programs
        self.hearing: ContextVar[Say] = ContextVar("hearing", default=lambda *_: None)

    def program(self, body: ResearchBody) -> Research:
        """The program for the body's options, opened over the shared model once."""
        key = body.model_dump_json(exclude={"question", "stream"})
        with self.opening:
            if key not in self.opened:
                self.opened[key] = Research.open(body.settings(self.settings), body.pipeline, body.policy,
                                                 body.artifact, body.web, lm=self.lm,
                                                 on_event=lambda *heard: self.hearing.get()(*heard))
                while len(self.opened) > OPENED:
                    self.opened.popitem(last=False)
            self.opened.move_to_end(key)
            return self.opened[key]

    def forget(self) -> None:
        """Drop the programs opened: the next runs open them again (over an index that changed)."""
        with self.opening:
            self.opened.clear()

    def start(self, body: ResearchBody) -> Run:
        """A run in the line for `body` (LineFull when the line has no room)."""
        run = Run(self.line.enter())
        task = asyncio.create_task(self._carry(run, body))
        self.carried.add(task)
        task.add_done_callback(self.carried.discard)
        return run

    async def _carry(self, run: Run, body: ResearchBody) -> None:
        try:
            told = None
            while not run.ticket.admitted:
                run.ticket.moved.clear()
                if run.cancelled.is_set():
                    return
                if (place := self.line.place(run.ticket)) != told:
                    run.events.put_nowait(("queued", {"position": place}))
                    told = place
                await run.ticket.moved.wait()
            if run.cancelled.is_set():
                return
            loop = asyncio.get_running_loop()
            document, trajectory = await loop.run_in_executor(self.worker, self._research, run, body, loop)
            if trajectory is not None:
                self.trajectories[run.id] = trajectory
                while len(self.trajectories) > self.settings.serve.trajectories:
                    self.trajectories.popitem(last=False)
            run.events.put_nowait(("answer", document))
        except Cancelled:
            log.info("run %s cancelled: its client went away", run.id)
        except UserError as exc:  # the request's options: an unknown artifact, a policy it lacks
            run.events.put_nowait(("error", {"error": reason(exc), "status": 400}))
        except RunFailed as exc:
            run.events.put_nowait(("error", {"error": reason(exc), "status": 502}))
        except Exception as exc:  # a run's failure is its client's answer, never the server's end
            log.error("run %s failed: %s: %s", run.id, type(exc).__name__, reason(exc))
            run.events.put_nowait(("error", {"error": f"unexpected {type(exc).__name__}: {reason(exc)}",
                                             "status": 500}))
        finally:
            self.line.leave(run.ticket)
            run.events.put_nowait(None)

    def _research(self, run: Run, body: ResearchBody,
                  loop: asyncio.AbstractEventLoop) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """In the worker thread: open the program with the request's options over the shared model, research,
        and return `ask --json`'s document and the trajectory."""

        def hear(text: str, kind: str | None = None) -> None:
            if run.cancelled.is_set():
                raise Cancelled
            loop.call_soon_threadsafe(run.events.put_nowait, (kind or "progress", {"text": text}))

        def written(text: str) -> None:
            loop.call_soon_threadsafe(run.events.put_nowait, ("token", {"text": text}))

        heard = self.hearing.set(hear)  # the run's steps, and the notes of opening its program, go to its client
        try:
            # The run's own copy of the model: its history holds this run's calls alone, which its usage and its
            # short answer's cut are read from, however many runs share the model.
            research = dataclasses.replace(self.program(body), lm=self.lm.copy())
            try:
                answer = research.run(body.question, on_token=written if body.stream else None)
            except UserError as exc:
                raise RunFailed(str(exc)) from exc
        finally:
            self.hearing.reset(heard)
        return answer.to_json(), answer.trajectory

    def close(self) -> None:
        for task in self.carried:
            task.cancel()
        self.worker.shutdown(wait=False, cancel_futures=True)
