"""The Python API: what `dspy-rag ask` does, as calls, for a program of your own.

    import dspy_rag

    research = dspy_rag.Research.open()  # the configured index and model, the default artifact and reranker
    result = research.ask("What was NVIDIA's Data Center revenue in fiscal year 2023?")
    print(result.short_answer, result.answer)
    for citation in result.citations:
        print(citation.label, citation.source, citation.chunk_id)
    result.trajectory.to_json()  # the deep program's steps, calls, guards and timings

`Research.open(config=dspy_rag.load_config(overrides={"index.path": "my-index"}), pipeline="baseline")` picks
another index or program; `research.program` is the `dspy.Module` itself, to compile or evaluate with DSPy.
`research.run(question).to_json()` is the document `dspy-rag ask --json` prints (the server's answer too).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspy_rag.answer_stream import Listener, listened
from dspy_rag.config import Config, load_config
from dspy_rag.errors import UserError

if TYPE_CHECKING:  # DSPy, Chroma and torch load on first use: `dspy-rag --help` stays fast
    import dspy

    from dspy_rag.index import Index
    from dspy_rag.web import WebSearch

MAX_QUESTION_CHARS = 2000
# A pasted colour code ("\x1b[31m") or window title ("\x1b]0;title\x07"), whole: removing only its ESC leaves "[31m".
TERMINAL_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[ -/]+[0-~]|[@-Z\\-_])")
Say = Callable[..., None]  # a progress line: (message) or (message, kind)


def clean_question(question: str, what: str = "question",
                   example: str = 'ask something, e.g. dspy-rag ask "What are the key risks?"') -> str:
    """The question (or another `what` a user typed, such as a search query) with terminal escape sequences and
    control characters removed; refuses an empty one, naming `example`, and an oversized one."""
    text = "".join(ch if ch.isprintable() or ch in "\n\t" else " " for ch in TERMINAL_ESCAPE.sub(" ", question))
    text = " ".join(text.split())
    if not text:
        raise UserError(f"the {what} is empty; {example}")
    if len(text) > MAX_QUESTION_CHARS:
        raise UserError(f"the {what} is {len(text):,} characters; keep it under {MAX_QUESTION_CHARS:,}")
    return text


def reranker_label(reranker: Any) -> str:
    """The reranker as a user knows it: the shipped or trained folder's name, or a model name; or none."""
    if reranker is None:
        return "none"
    return Path(reranker.name).name if Path(reranker.name).is_dir() else reranker.name


@contextmanager
def lm_failures(settings: Config) -> Iterator[None]:
    """The LM failures a user can act on (a full context window, unparseable output, a server down or refusing),
    as one-line errors."""
    from dspy.utils.exceptions import AdapterParseError, ContextWindowExceededError, LMError, LMTransportError

    from dspy_rag.pipelines.lm_calls import Unparseable

    model = settings.lm.model
    try:
        yield
    except ContextWindowExceededError as exc:
        raise UserError(f"the prompt does not fit {model}'s context window ({settings.lm.context_window} tokens); "
                        "lower retrieval.top_n or ingest.chunk_chars, or raise lm.context_window") from exc
    except (AdapterParseError, Unparseable) as exc:
        raise UserError(f"{model} returned output that could not be parsed; retry, or use a larger --model") from exc
    except LMTransportError as exc:  # no reply at all: DSPy's own advice after the ';' is for library users
        reason = (str(exc).strip().split(";")[0].splitlines() or [type(exc).__name__])[0]
        raise UserError(f"{reason}; check that {model}'s server (lm.api_base) runs and answers within lm.timeout "
                        f"({settings.lm.timeout:.0f} s)") from exc
    except LMError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{first_line}; check the model name, its server (lm.api_base) and its API key") from exc


@dataclass
class Research:
    """An index, a language model and a program over them, ready to answer questions."""

    config: Config
    index: Index
    lm: dspy.LM
    program: dspy.Module
    web: WebSearch | None = None
    pipeline: str = "deep"

    @classmethod
    def open(cls, config: Config | None = None, pipeline: str = "deep", policy: str = "auto",
             artifact: str | None = None, web: str | None = None, on_event: Say = lambda *_: None,
             lm: dspy.LM | None = None) -> Research:
        """Open the configured index (it must hold documents), load the model and build the program; `web` is
        tavily, off or a snapshot path (default: the configured provider), `on_event` hears each research step
        as (text, kind); `lm` is a model already loaded (a server's, shared by its runs), else the configured one
        is loaded."""
        from dspy_rag.index import Index
        from dspy_rag.models import build_lm
        from dspy_rag.pipelines.programs import program_for
        from dspy_rag.web import web_search

        config = config or load_config()
        index = Index(config).require()
        searcher = web_search(config, web)
        if lm is None:
            on_event(f"loading {config.lm.model}")
            lm = build_lm(config.lm)
        program = program_for(pipeline, config, index, searcher, policy, on_event, artifact)
        return cls(config, index, lm, program, searcher, pipeline)

    @property
    def reranker(self) -> str:
        """The program's reranker as a user knows it (`reranker_label`)."""
        return reranker_label(self.program.reranker)

    def run(self, question: str, started: float | None = None, on_token: Listener | None = None) -> Answer:
        """`ask`'s research of a question: the program's answer with the LM calls, tokens and seconds it took
        (counted from `started`, a `time.perf_counter()`, default now); LM failures a user can act on raise
        UserError. `on_token` hears the short answer as the model writes it, piece by piece (where the model
        streams; else whole, once written); the answer's checks may still change it."""
        from dspy_rag.models import mark, usage_after

        started = time.perf_counter() if started is None else started
        text = clean_question(question)
        marked = mark(self.lm, getattr(self.program, "planner_lm", None))
        with lm_failures(self.config):
            result = listened(lambda: self.ask(text), on_token)
        return Answer(self, text, result, usage_after(marked), time.perf_counter() - started)

    def ask(self, question: str) -> dspy.Prediction:
        """The program's answer: `answer` (cited), `short_answer`, `citations`, `flagged` (unsupported sentences),
        `conflicts`, `single_source` (web on), `passages` (the evidence), and for the deep program `trajectory`."""
        import dspy

        with dspy.context(lm=self.lm, adapter=dspy.JSONAdapter()):
            return self.program(question=clean_question(question))


@dataclass
class Answer:
    """One question's research as `ask` reports it: the program's prediction and what the run cost."""

    research: Research
    question: str
    result: dspy.Prediction
    usage: dict[str, int]
    seconds: float

    @cached_property
    def trajectory(self) -> dict[str, Any] | None:
        """The deep program's trajectory as JSON; the baseline has none."""
        return self.result.trajectory.to_json() if self.research.pipeline == "deep" else None

    @property
    def web_error(self) -> str | None:
        """Why the web search failed, if it did: for the question's own passages or for any step."""
        if self.trajectory is None:
            return self.result.web_error
        return next((e for e in (self.trajectory["web_error"], *(s["web_error"] for s in self.trajectory["steps"]))
                     if e), None)

    @property
    def guards(self) -> list[dict[str, Any]]:
        """Every guard that fired, as the trajectory records it."""
        return self.trajectory["guards"] if self.trajectory is not None else self.result.guards

    def to_json(self) -> dict[str, Any]:
        """The document `dspy-rag ask --json` prints."""
        result, research = self.result, self.research
        return {
            "question": self.question, "pipeline": research.pipeline, "model": research.config.lm.model,
            "planner_model": research.config.lm.separate_planner if research.pipeline == "deep" else None,
            "answer": result.answer, "short_answer": result.short_answer,
            "artifact": research.program.artifact if research.pipeline == "deep" else None,
            "citations": [vars(c) for c in result.citations], "flagged": getattr(result, "flagged", []),
            "guards": self.guards, "route": self.trajectory["route"] if self.trajectory is not None else "research",
            "conflicts": result.conflicts, "single_source": result.single_source,
            "retrieved": [{"id": p.id, "source": p.source, "section": p.section, "score": p.score}
                          for p in result.passages],
            "web": {"provider": research.web.name if research.web else "off", "error": self.web_error},
            "reranker": research.reranker, **self.usage,
            "tokens": self.usage["prompt_tokens"] + self.usage["completion_tokens"],
            "seconds": round(self.seconds, 2), "trajectory": self.trajectory,
        }
