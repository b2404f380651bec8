"""Transfer: the share of an artifact's gain kept on another model, from four eval columns paired by question."""

import math
from pathlib import Path

import pytest

from conftest import eval_row as row
from conftest import results_folder as folder_with
from dspy_rag.evals.stats import share_kept_ci
from dspy_rag.evals.transfer import main, share_text


def test_a_share_kept_in_proportion_on_every_question_is_that_share_exactly() -> None:
    home_after = [0.3, 0.5, 0.7, 0.3, 0.5, 0.7, 0.3, 0.5, 0.7, 0.9]
    away_after = [value / 2 for value in home_after]
    assert share_kept_ci([0.0] * 10, home_after, [0.0] * 10, away_after) == pytest.approx((0.5, 0.5))


def test_the_share_interval_holds_the_share_and_widens_as_the_home_gain_shrinks() -> None:
    home = [0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    away = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    zeros = [0.0] * len(home)
    low, high = share_kept_ci(zeros, home, zeros, away)
    assert low < (sum(away) / sum(home)) < high
    smaller_home = [value * 0.5 for value in home]
    small_low, small_high = share_kept_ci(zeros, smaller_home, zeros, away)
    assert small_high - small_low > high - low
    with pytest.raises(ValueError, match="same questions"):
        share_kept_ci(zeros, home, zeros, away[:-1])


def test_a_share_of_a_home_gain_that_may_be_none_is_unbounded() -> None:
    # At home one question more right than wrong of twelve: a gain whose interval reaches below zero.
    before = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    after = [0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    away = [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert share_kept_ci(before, after, [0.0] * 12, away) == (-math.inf, math.inf)
    assert share_text([before, after, [0.0] * 12, away]) == "200% (unbounded: the gain at home may be none)"


def test_the_table_gives_both_gains_and_the_share_per_set_and_over_all(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = [f"q{n}" for n in range(10)]
    # At home the artifact turns every question of set s right and leaves set t as it was; away it turns half of
    # set s right.
    home = folder_with(tmp_path / "home", [row(s, "deep@a", q, 0.0) for s in "st" for q in ids]
                       + [row("s", "deep+x@a", q, 1.0) for q in ids] + [row("t", "deep+x@a", q, 0.0) for q in ids])
    away = folder_with(tmp_path / "away", [row(s, "deep@b", q, 0.0) for s in "st" for q in ids]
                       + [row("s", "deep+x@b", q, float(n % 2)) for n, q in enumerate(ids)]
                       + [row("t", "deep+x@b", q, 0.0) for q in ids])
    main([str(home), "deep@a", "deep+x@a", str(away), "deep@b", "deep+x@b"])
    lines = capsys.readouterr().out.splitlines()
    by_set = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in lines[2:] if line}
    assert set(by_set) == {"s", "t", "all"}
    f1 = {name: cells[5:8] for name, cells in by_set.items()}
    assert f1["s"][0] == "+1.000 [+1.000, +1.000]" and f1["s"][1].startswith("+0.500 [")
    assert f1["s"][2].startswith("50% [") and f1["t"][2] == "- (no gain at home) |"
    assert f1["all"][2].startswith("50% [")


def test_columns_over_other_questions_are_refused(tmp_path: Path) -> None:
    home = folder_with(tmp_path / "home", [row("s", c, q, 0.5) for c in ("deep@a", "deep+x@a") for q in ("q1", "q2")])
    away = folder_with(tmp_path / "away", [row("s", c, "q1", 0.5) for c in ("deep@b", "deep+x@b")])
    with pytest.raises(SystemExit, match="differ in 1 question"):
        main([str(home), "deep@a", "deep+x@a", str(away), "deep@b", "deep+x@b"])
    with pytest.raises(SystemExit, match="usage"):
        main([str(home), "deep@a", "deep+x@a"])
