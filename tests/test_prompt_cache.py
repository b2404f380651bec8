"""The on-disk prompt cache with the real model: a new engine skips the prefix an earlier one saved."""

from pathlib import Path

import llama_cpp
import pytest
from dspy.lm15 import Config, Message, Request

from dspy_rag.llama_engine import LlamaEngine
from dspy_rag.models import ensure_local_model, lookup
from dspy_rag.prompt_cache import PromptCache

pytestmark = pytest.mark.slow
SYSTEM = "You are a careful assistant. " + " ".join(f"Rule {n}: answer briefly and exactly." for n in range(40))


def ask(cache_dir: Path, question: str) -> tuple[str, int]:
    """The answer, and how many prompt tokens llama.cpp had to evaluate for it."""
    engine = LlamaEngine(ensure_local_model(lookup("local/qwen2.5-coder-0.5b")), context_window=2048,
                         prompt_cache=PromptCache(cache_dir, "test-model"))
    try:
        response = engine.complete(Request(model="local", messages=(Message.user(question),), system=SYSTEM,
                                           config=Config(max_tokens=12, temperature=0.0)))
        return response.message.text, llama_cpp.llama_perf_context(engine.llama.ctx).n_p_eval
    finally:
        engine.close()


def test_a_new_engine_reuses_the_saved_system_prompt(tmp_path: Path) -> None:
    _, cold = ask(tmp_path, "Name a colour.")
    answer, warm = ask(tmp_path, "Name a fruit.")
    assert cold > 300 and warm < cold / 4, (cold, warm)
    assert answer.strip()


def test_a_corrupt_cache_file_is_discarded_and_rebuilt(tmp_path: Path) -> None:
    ask(tmp_path, "Name a colour.")
    (saved,) = tmp_path.glob("*.kv")
    saved.write_bytes(b"not a llama session")
    answer, evaluated = ask(tmp_path, "Name a fruit.")
    assert answer.strip() and evaluated > 300  # nothing reused from the corrupt file
    assert saved.stat().st_size > 10_000  # replaced by a valid state


def test_another_model_never_reads_the_state(tmp_path: Path) -> None:
    assert PromptCache(tmp_path, "model-a")._path(SYSTEM) != PromptCache(tmp_path, "model-b")._path(SYSTEM)
