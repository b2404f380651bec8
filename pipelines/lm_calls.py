"""Every LM call of the deep program goes through here: timed, token-counted, retried once when the
output cannot be parsed, degraded to a fallback after that, and held to the run's budgets. The baseline's one
call shares the retry.

Steps researched at once call from several threads: an attempt is reserved under a lock before it is made, so
together they never pass the LM-call budget, and each call counts its own tokens (DSPy's usage tracker is
per thread) rather than reading the LM's history, which the threads share."""

import threading
import time
from collections.abc import Callable
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError
from dspy.utils.usage_tracker import UsageTracker

from dspy_rag.config import BudgetConfig
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


def tokens_of(tracker: UsageTracker) -> tuple[int, int]:
    """The prompt and completion tokens a usage tracker counted, over every LM."""
    totals = tracker.get_total_tokens().values()
    return (sum(t.get("prompt_tokens") or 0 for t in totals), sum(t.get("completion_tokens") or 0 for t in totals))


class LMCalls:
    def __init__(self, budgets: BudgetConfig, records: list[CallRecord]) -> None:
        self.budgets = budgets
        self.records = records
        self.started = time.perf_counter()
        self.lock = threading.Lock()
        self.in_flight = 0  # attempts reserved and not yet recorded

    @property
    def used(self) -> int:
        """The attempts made, and those under way."""
        return sum(r.attempts for r in self.records) + self.in_flight

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
        with self.lock:
            if not final and (reason := self.exhausted()):
                raise BudgetExhausted(reason)
            self.in_flight += 1
        reserved = 1

        def may_retry(_attempts: int) -> bool:
            nonlocal reserved
            with self.lock:
                if self.used >= self.budgets.max_lm_calls:
                    return False
                self.in_flight += 1
            reserved += 1
            return True

        record = None
        started = time.perf_counter()
        try:
            with dspy.track_usage() as usage:
                result, attempts = predict_parsed(predictor, inputs, may_retry)
            prompt_tokens, completion_tokens = tokens_of(usage)
            record = CallRecord(module, step, round(time.perf_counter() - started, 3), attempts, prompt_tokens,
                                completion_tokens, degraded=result is None)
        finally:  # a call that raised (a full context window, a server down) is no attempt the budget counts
            with self.lock:
                self.in_flight -= reserved
                if record is not None:
                    self.records.append(record)
        return result if result is not None else fallback()
