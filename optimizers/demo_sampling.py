"""Demos drawn stratified by answer kind and by trainset: every kind present gets a demo before any kind gets a
second, and within a kind the trainsets take turns, so one big set does not crowd out the others and a set of
yes/no questions is shown a yes/no demo."""

import random
from collections import Counter, defaultdict
from collections.abc import Sequence

import dspy

from dspy_rag.optimizers.answer_kinds import KINDS, answer_kind


def stratified_sample(examples: Sequence[dspy.Example], k: int, rng: random.Random) -> list[dspy.Example]:
    """Up to k examples in rounds over the kinds (in KINDS order); each pick comes from the set with the fewest
    picks so far among those that still have one of that kind, ties in a seeded order of the sets."""
    queues: dict[str, dict[str, list[dspy.Example]]] = defaultdict(lambda: defaultdict(list))
    for example in rng.sample(list(examples), len(examples)):  # shuffled once, then taken from the end
        queues[answer_kind(str(example.short_answer))][example.get("trainset", "")].append(example)
    sets = sorted({name for by_set in queues.values() for name in by_set})
    rng.shuffle(sets)
    kinds = [kind for kind in KINDS if kind in queues]
    picks: Counter[str] = Counter()
    chosen: list[dspy.Example] = []
    while len(chosen) < min(k, len(examples)):
        for kind in kinds:
            left = [name for name in sets if queues[kind][name]]
            if not left or len(chosen) == k:
                continue
            name = min(left, key=lambda s: picks[s])  # the first of the ties in the seeded order
            chosen.append(queues[kind][name].pop())
            picks[name] += 1
    return chosen
