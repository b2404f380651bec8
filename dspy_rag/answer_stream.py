"""The final answer as the model writes it, for a run that listens: DSPy streams that one call's reply (its
`send_stream` setting, set around the call alone), and each piece of text that will stand goes to the run's listener.

DSPy's own `StreamListener` is not used: it finds a field in the reply by the markers of DSPy's chat, JSON and XML
adapters, and the short answer is asked for in plain text (`PlainAdapter`), the reply being the field whole. DSPy
sends the stream's chunks from an AnyIO worker thread to an event loop, so a listened run runs in one (`listened`).
"""

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

Listener = Callable[[str], None]  # hears each new piece of the answer's text, in order
T = TypeVar("T")

_listener: ContextVar[Listener | None] = ContextVar("answer_listener", default=None)


class Draft:
    """A reply being written, told to the listener as far as it will stand: `settle` maps the text so far to the
    start of the answer that no later text can change (a prefix of what the whole reply gives)."""

    def __init__(self, listener: Listener, settle: Callable[[str], str]) -> None:
        self.listener = listener
        self.settle = settle
        self.text = ""
        self.told = ""

    def written(self, piece: str) -> None:
        self.text += piece
        self._tell(self.settle(self.text))

    def finished(self, answer: str) -> None:
        """The reply's answer as read whole: what the listener has not heard of it yet."""
        self._tell(answer)

    def _tell(self, settled: str) -> None:
        # A settled text that does not extend what was told (the whole reply read otherwise than its pieces, e.g.
        # spaced irregularly) adds nothing: the run's answer has the last word.
        if len(settled) > len(self.told) and settled.startswith(self.told):
            self.listener(settled[len(self.told):])
            self.told = settled


class _Relay:
    """DSPy's `send_stream`: DSPy awaits `send` with each chunk of the streamed reply."""

    def __init__(self, draft: Draft) -> None:
        self.draft = draft

    async def send(self, chunk: Any) -> None:
        choices = getattr(chunk, "choices", None) or []  # the last chunk may carry the usage alone
        text = getattr(choices[0].delta, "content", None) if choices else None
        if text:
            self.draft.written(text)


def draft(settle: Callable[[str], str]) -> Draft | None:
    """A draft of the reply about to be written, for the run's listener; None when the run has none."""
    listener = _listener.get()
    return Draft(listener, settle) if listener is not None else None


def streaming(into: Draft | None) -> dict[str, Any]:
    """The `dspy.context` settings that stream the next call's reply into the draft (none without a draft)."""
    return {"send_stream": _Relay(into)} if into is not None else {}


def listened(work: Callable[[], T], listener: Listener | None) -> T:
    """`work()`, its final answer's text told to `listener` as the model writes it (in an AnyIO worker thread, with an
    event loop of its own in this thread for DSPy to send the stream to); `work()` as it is without a listener.
    Call it from a thread that runs no event loop."""
    if listener is None:
        return work()
    import anyio

    def heard() -> T:
        _listener.set(listener)
        return work()

    async def in_worker() -> T:
        # Abandoned on Ctrl-C, so the command can end; the caller stops the work at its next step.
        return await anyio.to_thread.run_sync(heard, abandon_on_cancel=True)

    return anyio.run(in_worker)
