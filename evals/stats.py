"""Bootstrap confidence intervals over questions: is a difference between two runs more than noise?"""

import random
import statistics
from collections.abc import Sequence

RESAMPLES = 2000
MIN_QUESTIONS_FOR_AN_INTERVAL = 8  # below this a percentile bootstrap is too narrow to mean anything


def bootstrap_ci(values: Sequence[float], level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """The percentile interval of the mean, resampling questions with replacement."""
    if not values:
        raise ValueError("no values to resample")
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(RESAMPLES))
    tail = (1 - level) / 2
    return means[int(tail * (RESAMPLES - 1))], means[int((1 - tail) * (RESAMPLES - 1))]


def paired_delta_ci(before: Sequence[float], after: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The interval of the mean per-question gain; the same questions are resampled for both runs."""
    if len(before) != len(after):
        raise ValueError("paired runs must score the same questions")
    return bootstrap_ci([b - a for a, b in zip(before, after, strict=True)], level)
