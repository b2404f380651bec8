"""The line in front of the model: the embedded model serves one run at a time, a bounded number wait their turn
in order, and one more is turned away. Used from the event loop's thread only, so it needs no lock."""

import asyncio
from dataclasses import dataclass, field


class LineFull(Exception):
    """No room to wait: the client should retry later."""


@dataclass(eq=False)
class Ticket:
    admitted: bool = False
    done: bool = False
    moved: asyncio.Event = field(default_factory=asyncio.Event)  # set whenever the ticket's place changes


class Line:
    def __init__(self, parallel: int, room: int) -> None:
        self.parallel = parallel
        self.free = parallel
        self.room = room
        self.waiting: list[Ticket] = []

    @property
    def running(self) -> int:
        return self.parallel - self.free

    def enter(self) -> Ticket:
        """A ticket admitted at once when a slot is free, else waiting at the back; LineFull when none is left."""
        if not self.free and len(self.waiting) >= self.room:
            raise LineFull(f"{len(self.waiting)} requests are already waiting for the model")
        ticket = Ticket()
        self.waiting.append(ticket)
        self._advance()
        return ticket

    def place(self, ticket: Ticket) -> int:
        """1 for the next to run, 2 behind it, ...; 0 once admitted."""
        return 0 if ticket.admitted else self.waiting.index(ticket) + 1

    def leave(self, ticket: Ticket) -> None:
        """The ticket's run is over (or never started): its slot or its place goes to the next."""
        if ticket.done:
            return
        ticket.done = True
        if ticket.admitted:
            self.free += 1
        else:
            self.waiting.remove(ticket)
        self._advance()

    def _advance(self) -> None:
        while self.free and self.waiting:
            admitted = self.waiting.pop(0)
            admitted.admitted = True
            admitted.moved.set()
            self.free -= 1
        for ticket in self.waiting:
            ticket.moved.set()
