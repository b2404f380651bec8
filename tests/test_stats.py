"""The bootstrap intervals an eval and a compile print: what they contain, how they narrow, and the
degenerate columns where BCa itself has no answer."""

import random
import statistics
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dspy_rag.evals.stats import MIN_QUESTIONS_FOR_AN_INTERVAL, bootstrap_ci, gain_interval, paired_delta_ci

# Scores as an eval produces them: F1-like fractions, with the all-or-nothing values common.
SCORES = st.lists(st.sampled_from([0.0, 0.5, 1.0]) | st.floats(0, 1), min_size=8, max_size=40)


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(SCORES)
def test_the_interval_contains_the_mean_and_is_never_nan(values: list[float]) -> None:
    low, high = bootstrap_ci(values)
    mean = statistics.fmean(values)
    assert low - 1e-12 <= mean <= high + 1e-12


def test_the_same_scores_give_the_same_interval() -> None:
    values = [random.Random(3).random() for _ in range(20)]
    assert bootstrap_ci(values) == bootstrap_ci(list(values))
    assert paired_delta_ci(values, values[::-1]) == paired_delta_ci(values, values[::-1])


def test_more_questions_narrow_the_interval() -> None:
    pattern = [1.0, 0.0, 0.5, 1.0, 0.0, 0.25, 1.0, 0.75]
    widths = [high - low for low, high in (bootstrap_ci(pattern * k) for k in (1, 4, 16))]
    assert widths[0] > widths[1] > widths[2] > 0


def test_a_column_that_scores_the_same_everywhere_has_a_point_interval() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy warns, then returns nan, when asked for BCa here
        assert bootstrap_ci([0.5] * 10) == (0.5, 0.5)
        assert paired_delta_ci([0.3, 0.7] * 5, [0.3, 0.7] * 5) == (0.0, 0.0)
        # the same gain on every question, up to float noise from the subtraction
        assert paired_delta_ci([0.1, 0.3] * 5, [0.3, 0.5] * 5) == pytest.approx((0.2, 0.2))


def test_a_paired_interval_cancels_how_hard_each_question_is() -> None:
    rng = random.Random(7)
    before = [rng.random() for _ in range(30)]  # questions range from hard to easy
    after = [b + 0.05 + rng.gauss(0, 0.02) for b in before]  # a small, steady gain on each
    low, high = paired_delta_ci(before, after)
    assert 0 < low < statistics.fmean(after) - statistics.fmean(before) < high
    # unpaired, the spread between questions swamps the gain: the two runs' intervals overlap
    assert bootstrap_ci(after)[0] < bootstrap_ci(before)[1]


def test_a_loss_reads_as_a_loss() -> None:
    before = [1.0, 0.5, 1.0, 0.75, 1.0, 0.5, 1.0, 0.25, 1.0, 1.0]
    low, high = paired_delta_ci(before, [b - 0.25 if i % 3 else b for i, b in enumerate(before)])
    assert low < high < 0


def test_runs_over_different_questions_are_refused() -> None:
    with pytest.raises(ValueError, match="same questions"):
        paired_delta_ci([1.0] * 8, [1.0] * 9)
    with pytest.raises(ValueError, match="no values"):
        bootstrap_ci([])


def test_the_ledgers_gain_interval_needs_enough_questions() -> None:
    few = MIN_QUESTIONS_FOR_AN_INTERVAL - 1
    assert gain_interval([0.0] * few, [1.0] * few) is None
    low, high = gain_interval([0.0, 0.5] * 6, [0.5, 0.5] * 6)
    assert 0 < low <= 0.25 <= high <= 0.5 and round(low, 4) == low
