"""Conflicts: passages of the evidence that give different values for the same quantity (dspy_rag/figures.py),
each value with the passages that state it and their source tiers.

Only the question's quantities count: a slot whose metric's last word (its head, "revenue") is not a word of the
question is some other figure the evidence happens to hold.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from dspy_rag.figures import Figure, Slot, figures
from dspy_rag.retrieval import Passage


@dataclass
class Stated:
    """One value of a conflict: as the text states it, the passages stating it (numbered from 1 in the evidence),
    and the best (lowest) tier among their sources."""

    text: str
    figure: Figure
    passages: list[int] = field(default_factory=list)
    tier: int = 0


@dataclass
class Conflict:
    slot: Slot
    values: list[Stated]  # the best-tier value first, then by the order of the evidence

    @property
    def preferred(self) -> Stated | None:
        """The value of the single highest-tier source, when the values' tiers differ."""
        best = self.values[0]
        return best if all(v.tier > best.tier for v in self.values[1:]) else None


def _words(text: str) -> set[str]:
    return {w.rstrip("s") for w in re.findall(r"[a-z]+", text.lower())}


def conflicts(question: str, evidence: Sequence[Passage], tier: Sequence[int]) -> list[Conflict]:
    """The question's slots on which the evidence's passages disagree; `tier` is each passage's source tier."""
    asked = _words(question)
    by_slot: list[tuple[Slot, list[tuple[int, Figure]]]] = []
    for number, passage in enumerate(evidence, start=1):
        for figure in figures(passage.text):
            if figure.slot.metric[-1].rstrip("s") not in asked:
                continue
            group = next((g for slot, g in by_slot if slot.same_as(figure.slot)), None)
            if group is None:
                by_slot.append((figure.slot, group := []))
            group.append((number, figure))
    found = []
    for slot, group in by_slot:
        values: list[Stated] = []
        for number, figure in group:
            same = next((v for v in values if v.figure.agrees_with(figure)), None)
            if same is None:
                values.append(same := Stated(figure.text, figure, tier=tier[number - 1]))
            if number not in same.passages:
                same.passages.append(number)
                same.tier = min(same.tier, tier[number - 1])
        if len(values) > 1 and len({n for v in values for n in v.passages}) > 1:
            found.append(Conflict(slot, sorted(values, key=lambda v: (v.tier, v.passages[0]))))
    return found
