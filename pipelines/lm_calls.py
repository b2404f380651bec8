"""Every LM call of the deep program goes through here: timed, token-counted, retried once when the
output cannot be parsed, degraded to a fallback after that, and held to the run's budgets. The baseline's one
call shares the retry."""

import time
from collections.abc import Callable
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from dspy_rag.config import BudgetConfig
from dspy_rag.models import usage_since
from dspy_rag.pipelines.trajectory import CallRecord

RETRY_TEMPERATURE = 0.7  # a second greedy decode of the same prompt would repeat the same unparseable output


class BudgetExhausted(Exception):
    """The research must stop and answer with what it has."""


class Unparseable(Exception):
    """A call whose output did not parse, retried, with nothing to fall back on."""


def predict_parsed(predictor: dspy.Predict, inputs: dict[str, Any],
                   may_retry: Callable[[int], bool] = lambda _attempts: True) -> tuple[dspy.Prediction | None, int]:
    """The prediction and the attempts it took: greedy first, then once sampled if the output did not parse
    (and `may_retry` allows another call after that many); None when no output parsed."""
    attempts = 0
    for config in ({}, {"temperature": RETRY_TEMPERATURE}):
        attempts += 1
        try:
            return predictor(**inputs, config=config), attempts
        except AdapterParseError:
            if not may_retry(attempts):
                break
    return None, attempts


class LMCalls:
    def __init__(self, budgets: BudgetConfig, records: list[CallRecord]) -> None:
        self.budgets = budgets
        self.records = records
        self.started = time.perf_counter()

    @property
    def used(self) -> int:
        return sum(r.attempts for r in self.records)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def exhausted(self) -> str | None:
        """Which budget ran out, if any; one call stays in reserve for the final answer."""
        if self.used >= self.budgets.max_lm_calls - 1:
            return f"LM-call budget ({self.budgets.max_lm_calls}) spent"
        if self.elapsed >= self.budgets.wall_clock_seconds:
            return f"time budget ({self.budgets.wall_clock_seconds:.0f} s) spent"
        return None

    def __call__(self, module: str, predictor: dspy.Predict, fallback: Callable[[], dspy.Prediction],
                 step: int | None = None, final: bool = False, **inputs: Any) -> dspy.Prediction:
        """The prediction, or the fallback's when the output never parsed (the record says so).

        The final answer may use the reserved call; nothing else may."""
        if not final and (reason := self.exhausted()):
            raise BudgetExhausted(reason)
        lm = dspy.settings.lm
        history_start = len(lm.history)
        started = time.perf_counter()
        result, attempts = predict_parsed(predictor, inputs,
                                          lambda attempts: self.used + attempts < self.budgets.max_lm_calls)
        usage = usage_since(lm, history_start)
        self.records.append(CallRecord(module, step, round(time.perf_counter() - started, 3), attempts,
                                       usage["prompt_tokens"], usage["completion_tokens"], degraded=result is None))
        return result if result is not None else fallback()
