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
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def clean_question(question: str) -> str:
    """The question with terminal escape sequences and control characters removed; refuses empty and oversized
    questions."""
    text = "".join(ch if ch.isprintable() or ch in "\n\t" else " " for ch in TERMINAL_ESCAPE.sub(" ", question))
    text = " ".join(text.split())
    if not text:
        raise UserError("the question is empty; ask something, e.g. dspy-rag ask \"What are the key risks?\"")
    if len(text) > MAX_QUESTION_CHARS:
        raise UserError(f"the question is {len(text):,} characters; keep it under {MAX_QUESTION_CHARS:,}")
    return text


def reranker_label(reranker: Any) -> str:
    """The reranker as a user knows it: the shipped or trained folder's name, or a model name; or none."""
    if reranker is None:
        return "none"
    return Path(reranker.name).name if Path(reranker.name).is_dir() else reranker.name


@dataclass
class Research:
    """An index, a language model and a program over them, ready to answer questions."""

    config: Config
    index: Index
    lm: dspy.LM
    program: dspy.Module
    web: WebSearch | None = None

    @classmethod
    def open(cls, config: Config | None = None, pipeline: str = "deep", policy: str = "llm",
             artifact: str | None = None, web: str | None = None, on_event: Say = lambda *_: None) -> Research:
        """Open the configured index (it must hold documents), load the model and build the program; `web` is
        tavily, off or a snapshot path (default: the configured provider), `on_event` hears each research step
        as (text, kind)."""
        from dspy_rag.index import Index
        from dspy_rag.models import build_lm
        from dspy_rag.pipelines.programs import program_for
        from dspy_rag.web import web_search

        config = config or load_config()
        index = Index(config).require()
        searcher = web_search(config, web)
        program = program_for(pipeline, config, index, searcher, policy, on_event, artifact)
        return cls(config, index, build_lm(config.lm), program, searcher)

    def ask(self, question: str) -> dspy.Prediction:
        """The program's answer: `answer` (cited), `short_answer`, `citations`, `flagged` (unsupported sentences),
        `conflicts`, `single_source` (web on), `passages` (the evidence), and for the deep program `trajectory`."""
        import dspy

        with dspy.context(lm=self.lm, adapter=dspy.JSONAdapter()):
            return self.program(question=clean_question(question))
