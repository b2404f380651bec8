"""An in-process llama.cpp engine for `dspy.LM`, with JSON-schema-constrained decoding and streamed replies.

Small models rarely emit parseable structured output on their own; constraining the sampler with a
grammar built from the signature's JSON schema makes every answer parse.
"""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dspy.lm15 import (
    ContextLengthError,
    Message,
    Request,
    Response,
    StreamDeltaEvent,
    StreamEndEvent,
    StreamStartEvent,
    TextDelta,
    TextPart,
    Usage,
)

from dspy_rag.prompt_cache import PromptCache

# DSPy drops maxItems from list fields; without caps a small model can repeat list items, or a sentence,
# until max_tokens cuts the JSON off and nothing parses.
MAX_ARRAY_ITEMS = 5
MAX_STRING_CHARS = 800
# Rationale and query fields: a small model otherwise rambles (or copies whole passages) for
# hundreds of tokens, at ~30 tokens/s.
FIELD_CHARS = {"reason": 160, "justification": 160, "query": 200, "sub_question": 240, "finding": 400,
               "keywords": 40, "context": 600, "rewrites": 400}
# The distiller's notes are "at most three short sentences": the 0.5B copied passages into them (240 tokens, the
# slowest call of a step). A plan holds at most the step budget's four steps, a step at most four keywords: the
# 0.5B planned the reference question as repeated steps with five keywords each (one a whole section title) and
# spent its 512 tokens, a third of the run's time, before the cut.
FIELD_ITEMS = {"steps": 4, "keywords": 4}


def bound_schema(schema: Any, items: int = MAX_ARRAY_ITEMS, chars: int = MAX_STRING_CHARS) -> Any:
    """A copy of a JSON schema in which arrays hold at most `items` items (and arrays of objects at least one),
    and free strings at most `chars` characters."""
    if isinstance(schema, list):
        return [bound_schema(item, items, chars) for item in schema]
    if not isinstance(schema, dict):
        return schema
    capped = {key: bound_schema(value, items, chars) for key, value in schema.items()}
    for name, field in capped.get("properties", {}).items():
        if name in FIELD_ITEMS and field.get("type") == "array":
            field["maxItems"] = min(field["maxItems"], FIELD_ITEMS[name])
        text = field.get("items", {}) if field.get("type") == "array" else field  # a list's items, or the field
        if name in FIELD_CHARS and text.get("type") == "string" and "enum" not in text:
            text["maxLength"] = min(text["maxLength"], FIELD_CHARS[name])
    if capped.get("type") == "array":
        capped["maxItems"] = min(capped.get("maxItems", items), items)
        item = capped.get("items", {})
        if item.get("type") == "object" or "$ref" in item:  # an empty plan or list of records is never an answer
            capped["minItems"] = max(capped.get("minItems", 1), 1)
    if capped.get("type") == "string" and "enum" not in capped:
        capped["maxLength"] = min(capped.get("maxLength", chars), chars)
    return capped


def _llama_response_format(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    if not response_format:
        return None
    if response_format.get("type") == "json_schema":
        schema = response_format.get("schema") or response_format.get("json_schema", {}).get("schema")
        return {"type": "json_object", "schema": bound_schema(schema)}
    if response_format.get("type") == "json_object":
        return {"type": "json_object"}
    return None


class LlamaEngine:
    """The engine contract of `dspy.clients.engines.base.Engine`, backed by one `llama_cpp.Llama`."""

    supports_response_schema = True
    supported_params = frozenset({"temperature", "max_tokens", "top_p", "stop", "seed", "response_format"})

    def __init__(self, model_path: Path, context_window: int = 4096, threads: int = 2,
                 prompt_cache: PromptCache | None = None) -> None:
        from llama_cpp import Llama

        started = time.perf_counter()
        # n_threads_batch defaults to half the cores, which halves prompt speed on a 2-core machine.
        self.llama = Llama(
            model_path=str(model_path),
            n_ctx=context_window,
            n_threads=threads,
            n_threads_batch=threads,
            flash_attn=True,
            verbose=False,
        )
        self.load_seconds = time.perf_counter() - started
        self.context_window = context_window
        self.prompt_cache = prompt_cache
        self._lock = threading.Lock()  # a Llama object is not thread-safe

    @staticmethod
    def _messages(request: Request) -> list[dict[str, str]]:
        messages = []
        if request.system is not None:
            system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system)
            messages.append({"role": "system", "content": system})
        messages.extend({"role": m.role, "content": m.text or ""} for m in request.messages)
        return messages

    @staticmethod
    def _options(request: Request) -> dict[str, Any]:
        config = request.config
        options: dict[str, Any] = {
            "temperature": 0.0 if config.temperature is None else config.temperature,
            "max_tokens": config.max_tokens or 512,
        }
        if config.top_p is not None:
            options["top_p"] = config.top_p
        if config.stop:
            options["stop"] = list(config.stop)
        if config.seed is not None:
            options["seed"] = config.seed
        response_format = _llama_response_format(config.response_format)
        if response_format:
            options["response_format"] = response_format
        return options

    @contextmanager
    def _turn(self, messages: list[dict[str, str]]) -> Iterator[None]:
        """The model to this call alone, its system message's saved prompt state restored before and saved after,
        and a prompt over the context window raised as DSPy's error for it."""
        system = messages[0]["content"] if messages[0]["role"] == "system" else ""
        with self._lock:
            if self.prompt_cache:
                self.prompt_cache.restore(self.llama, system)
            try:
                yield
            except ValueError as exc:
                if "context window" in str(exc):
                    raise ContextLengthError(str(exc), provider="local") from exc
                raise
            if self.prompt_cache:
                self.prompt_cache.save(self.llama, system)

    def complete(self, request: Request) -> Response:
        messages = self._messages(request)
        with self._turn(messages):
            output = self.llama.create_chat_completion(messages=messages, **self._options(request))
        choice = output["choices"][0]
        usage = output.get("usage", {})
        return Response(
            id=output.get("id"),
            model=output.get("model", "local"),
            message=Message.assistant([TextPart(choice["message"].get("content") or "")]),
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
            usage=Usage(input_tokens=usage.get("prompt_tokens"), output_tokens=usage.get("completion_tokens")),
        )

    def stream(self, request: Request) -> Iterator[Any]:
        """The reply as llama.cpp writes it: a start event, a text delta for each piece, and an end event with the
        tokens counted as `complete` counts them (llama.cpp's stream reports none)."""
        messages = self._messages(request)
        prompt_tokens, finish = 0, None
        with self._turn(messages):
            for n, piece in enumerate(self.llama.create_chat_completion(messages=messages, stream=True,
                                                                        **self._options(request))):
                if n == 0:
                    # The whole prompt (a cached prefix too) is evaluated before the first piece is written. A first
                    # piece held back (a character split across tokens) counts its tokens here, not below.
                    prompt_tokens = self.llama.n_tokens
                    yield StreamStartEvent(id=piece.get("id"), model=piece.get("model") or "local")
                choice = piece["choices"][0]
                if text := choice["delta"].get("content"):
                    yield StreamDeltaEvent(delta=TextDelta(text=text, part_index=0))
                finish = choice.get("finish_reason") or finish
            evaluated = self.llama.n_tokens
        # Each token written is evaluated before the next is sampled, except the last when max_tokens cut the reply.
        cut = finish == "length"
        yield StreamEndEvent(finish_reason="length" if cut else "stop",
                             usage=Usage(input_tokens=prompt_tokens, output_tokens=evaluated - prompt_tokens + cut))

    def close(self) -> None:
        self.llama.close()
