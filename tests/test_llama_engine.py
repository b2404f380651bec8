"""The in-process llama.cpp engine on the real 0.5B model: schema-constrained output parses."""

from typing import Literal

import dspy
import pytest
from dspy.utils.exceptions import ContextWindowExceededError

from dspy_rag.config import LMConfig
from dspy_rag.models import build_lm

pytestmark = pytest.mark.slow


class Triage(dspy.Signature):
    """Classify the request and list its key terms."""

    request: str = dspy.InputField()
    urgency: Literal["low", "high"] = dspy.OutputField()
    terms: list[str] = dspy.OutputField()
    count: int = dspy.OutputField(desc="how many terms")


@pytest.fixture(scope="module")
def local_lm() -> dspy.LM:
    return build_lm(LMConfig(max_tokens=200))


def test_structured_output_parses_and_lists_are_capped(local_lm: dspy.LM) -> None:
    with dspy.context(lm=local_lm, adapter=dspy.JSONAdapter()):
        result = dspy.Predict(Triage)(request="The production database is down and every customer is affected "
                                              "by outages, errors, timeouts, crashes, lost orders, refunds.")
    assert result.urgency in ("low", "high")
    assert isinstance(result.count, int)
    assert 1 <= len(result.terms) <= 5
    usage = local_lm.history[-1]["usage"]
    assert usage["prompt_tokens"] > 50 and usage["completion_tokens"] > 3


def test_a_prompt_beyond_the_context_window_is_a_clear_error(local_lm: dspy.LM) -> None:
    with dspy.context(lm=local_lm, adapter=dspy.JSONAdapter()), pytest.raises(ContextWindowExceededError):
        dspy.Predict(Triage)(request="word " * 6000)


def test_lm_threads_reach_llama_cpp() -> None:
    lm = build_lm(LMConfig(threads=1, prompt_cache=False))
    assert lm.engine.llama.n_threads == 1 and lm.engine.llama.n_threads_batch == 1
