"""Reciprocal Rank Fusion: score(d) = sum of 1 / (k + rank), ranks from 1; expected sums worked out by hand."""

import pytest

from dspy_rag.retrieval import Passage, interleave, reciprocal_rank_fusion

# x, p, q, r appear only in the first list and s, t, u, v only in the second; y is 4th and 5th.
RANKINGS = [["x", "p", "q", "y", "r"], ["s", "t", "u", "v", "y"]]

EXPECTED = {
    # k=60: y (1/64 + 1/65 ≈ 0.0310) beats two first places (1/61 ≈ 0.0164); equal scores go by id.
    60: [("y", 1 / 64 + 1 / 65), ("s", 1 / 61), ("x", 1 / 61), ("p", 1 / 62), ("t", 1 / 62),
         ("q", 1 / 63), ("u", 1 / 63), ("v", 1 / 64), ("r", 1 / 65)],
    # k=1: first places (1/2) beat y (1/5 + 1/6 ≈ 0.367), which still beats second places (1/3).
    1: [("s", 1 / 2), ("x", 1 / 2), ("y", 1 / 5 + 1 / 6), ("p", 1 / 3), ("t", 1 / 3),
        ("q", 1 / 4), ("u", 1 / 4), ("v", 1 / 5), ("r", 1 / 6)],
}


@pytest.mark.parametrize("k", sorted(EXPECTED))
def test_hand_computed_fusion(k: int) -> None:
    fused = reciprocal_rank_fusion(RANKINGS, k=k)
    assert [item for item, _ in fused] == [item for item, _ in EXPECTED[k]]
    assert [score for _, score in fused] == pytest.approx([score for _, score in EXPECTED[k]])


def test_default_k_is_60() -> None:
    assert reciprocal_rank_fusion(RANKINGS) == reciprocal_rank_fusion(RANKINGS, k=60)


@pytest.mark.parametrize("order", [["b", "a"], ["a", "b"]])
def test_ties_broken_by_id_whatever_the_input_order(order: list[str]) -> None:
    # Each id is first in one list and second in the other: equal scores.
    rankings = [order, order[::-1]]
    assert [item for item, _ in reciprocal_rank_fusion(rankings, k=60)] == ["a", "b"]


def test_document_in_only_one_list() -> None:
    fused = dict(reciprocal_rank_fusion([["a", "b"], ["b"]], k=10))
    assert fused == pytest.approx({"a": 1 / 11, "b": 1 / 12 + 1 / 11})


@pytest.mark.parametrize("rankings", [[], [[]], [[], []]])
def test_nothing_to_fuse(rankings: list[list[str]]) -> None:
    assert reciprocal_rank_fusion(rankings) == []


def test_interleave_takes_turns_and_keeps_each_id_once() -> None:
    def ranking(*ids: str) -> list[Passage]:
        return [Passage(i, f"text {i}", "doc", "", 1.0) for i in ids]

    merged = interleave([ranking("a", "b", "c", "d"), ranking("x", "a", "y")])
    assert [p.id for p in merged] == ["a", "x", "b", "c", "y", "d"]
    assert interleave([]) == [] and [p.id for p in interleave([ranking("a")])] == ["a"]
