"""Bootstrap confidence intervals over questions: is a difference between two runs more than noise?

Intervals are 95% BCa (bias-corrected and accelerated) bootstrap intervals from scipy, with a fixed seed so the
same scores always print the same interval."""

import math
from collections.abc import Callable, Sequence

import numpy as np

LEVEL = 0.95
RESAMPLES = 9999
SEED = 0
SAME_SCORE = 1e-9  # scores closer than this are one score: far below the three decimals an interval prints
MIN_QUESTIONS_FOR_AN_INTERVAL = 8  # below this a bootstrap interval is too unstable to mean anything


def bootstrap_ci(values: Sequence[float]) -> tuple[float, float]:
    """The interval of the mean, resampling questions with replacement."""
    if not len(values):
        raise ValueError("no values to resample")
    return _bca(np.asarray(values, dtype=float), (values,), _mean, paired=False)


def paired_delta_ci(before: Sequence[float], after: Sequence[float]) -> tuple[float, float]:
    """The interval of the mean per-question gain (after - before); a resample draws the same questions from both
    runs, so how hard each question is cancels out."""
    if len(before) != len(after):
        raise ValueError("paired runs must score the same questions")
    if not len(before):
        raise ValueError("no values to resample")
    gains = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)
    return _bca(gains, (before, after), _mean_gain, paired=True)


def gain_interval(before: Sequence[float], after: Sequence[float]) -> list[float] | None:
    """The paired interval of the gain, rounded as the ledger keeps it; None for too few questions to mean
    anything."""
    if len(before) < MIN_QUESTIONS_FOR_AN_INTERVAL:
        return None
    return [round(bound, 4) for bound in paired_delta_ci(before, after)]


def share_kept_ci(home_before: Sequence[float], home_after: Sequence[float], away_before: Sequence[float],
                  away_after: Sequence[float]) -> tuple[float, float]:
    """The interval of the share of a gain kept elsewhere: the mean gain away (after - before on another model) over
    the mean gain at home, a resample drawing the same questions from all four runs. Wide where the home gain
    is small, as the share is then little known; unbounded, (-inf, inf), where the home gain may be none (its own
    interval reaches zero, or a resample gains nothing at home), as a share of no gain may be anything."""
    runs = [np.asarray(run, dtype=float) for run in (home_before, home_after, away_before, away_after)]
    if len({len(run) for run in runs}) != 1:
        raise ValueError("paired runs must score the same questions")
    if not len(runs[0]):
        raise ValueError("no values to resample")
    if paired_delta_ci(runs[0], runs[1])[0] <= 0:
        return -math.inf, math.inf
    home, away = runs[1] - runs[0], runs[3] - runs[2]
    point = float(away.mean() / home.mean())
    if np.allclose(away, home * point, rtol=0, atol=SAME_SCORE):  # every resample gives the one share
        return point, point
    low, high = _bca(np.concatenate((home, away)), tuple(runs), _share_kept, paired=True)
    return (low, high) if math.isfinite(low) and math.isfinite(high) else (-math.inf, math.inf)


def verdict(low: float, high: float) -> str:
    """What a gain's interval says."""
    return "a gain" if low > 0 else "a loss" if high < 0 else "inside noise"


def _mean(values: np.ndarray, axis: int) -> np.ndarray:
    return np.mean(values, axis=axis)


def _mean_gain(before: np.ndarray, after: np.ndarray, axis: int) -> np.ndarray:
    return np.mean(after - before, axis=axis)


def _share_kept(home_before: np.ndarray, home_after: np.ndarray, away_before: np.ndarray, away_after: np.ndarray,
                axis: int) -> np.ndarray:
    return np.mean(away_after - away_before, axis=axis) / np.mean(home_after - home_before, axis=axis)


def _bca(per_question: np.ndarray, data: tuple[Sequence[float], ...], statistic: Callable[..., np.ndarray],
         paired: bool) -> tuple[float, float]:
    # Every question scoring the same (up to float noise from subtracting two runs) makes every resample's mean
    # that one value: the interval is that point. BCa's acceleration is 0/0 there and scipy would return nan.
    if np.allclose(per_question, per_question.mean(), rtol=0, atol=SAME_SCORE):
        point = float(per_question.mean())
        return point, point
    from scipy.stats import bootstrap  # here: scipy.stats takes ~1 s to import, and every CLI command imports this

    interval = bootstrap(data, statistic, paired=paired, vectorized=True, confidence_level=LEVEL,
                         n_resamples=RESAMPLES, method="BCa", rng=SEED).confidence_interval
    return float(interval.low), float(interval.high)
