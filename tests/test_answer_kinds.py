"""Answer kinds read from gold answers, and stratified demo sampling: every kind present before any kind twice,
the sets in turn within a kind, the same draw every time."""

import random
from collections import Counter
from pathlib import Path

import dspy
import pytest

from dspy_rag.optimizers.answer_kinds import answer_kind
from dspy_rag.optimizers.demo_sampling import stratified_sample
from dspy_rag.optimizers.pool import Pool


@pytest.mark.parametrize(("answer", "kind"), [
    ("Yes", "yes/no"), ("no", "yes/no"), ("No.", "yes/no"),
    ("1995", "date"), ("1 August 1973", "date"), ("February 4, 1948", "date"), ("march", "date"),
    ("June 2045", "date"), ("19th century", "date"), ("the last Sunday in January", "date"),
    ("$15.01 billion", "figure"), ("41%", "figure"), ("26,196", "figure"), ("3 million square feet", "figure"),
    ("about $1.18 trillion", "figure"), ("twice", "figure"), ("5.1", "figure"),
    ("TSMC and Samsung", "list"), ("Lakota and Dakota Sioux", "list"), ("Intel, AMD, Broadcom", "list"),
    ("Teaneck, New Jersey", "name"), ("Hank Williams, Jr.", "name"), ("60th parallel south", "name"),
    ("A800", "name"), ("Compute & Networking", "name"), ("Sam Bankman-Fried", "name"),
])
def test_answer_kinds_of_gold_answers(answer: str, kind: str) -> None:
    assert answer_kind(answer) == kind


def kinds_of(name: str) -> Counter[str]:
    return Counter(answer_kind(q.answer) for q in Pool.load(name).sets[0].questions("train"))


def test_each_real_set_has_the_kinds_it_is_known_for(shared_data: Path) -> None:
    multihop, musique, tenk = kinds_of("multihop-rag"), kinds_of("musique"), kinds_of("nvidia-10k")
    assert multihop["yes/no"] > multihop.total() / 3  # MultiHop-RAG's comparison and temporal questions
    assert musique["date"] > 0 and musique["name"] > musique.total() / 2
    assert tenk["figure"] > tenk.total() / 2


def example(answer: str, trainset: str, n: int) -> dspy.Example:
    return dspy.Example(id=f"{trainset}{n}", question=f"Q{n}?", short_answer=answer, trainset=trainset)


def test_every_kind_gets_a_demo_before_any_kind_gets_a_second() -> None:
    # a big set of names crowds out nothing: the small set's yes/no and date each get their demo
    pool = ([example(f"Name {n}", "big", n) for n in range(20)] + [example("$1 billion", "big", 20)]
            + [example("yes", "small", 0), example("1995", "small", 1)])
    chosen = stratified_sample(pool, 4, random.Random(0))
    assert sorted(answer_kind(e.short_answer) for e in chosen) == ["date", "figure", "name", "yes/no"]
    five = stratified_sample(pool, 5, random.Random(0))
    assert Counter(answer_kind(e.short_answer) for e in five) == {"name": 2, "yes/no": 1, "figure": 1, "date": 1}
    plain = random.Random(0).sample(pool, 4)  # what plain sampling draws: the names of the big set
    assert Counter(answer_kind(e.short_answer) for e in plain)["name"] >= 3


def test_within_a_kind_the_sets_take_turns_and_the_draw_repeats() -> None:
    pool = [example(f"Name {n}", "big", n) for n in range(30)] + [example(f"Other {n}", "small", n) for n in range(2)]
    chosen = stratified_sample(pool, 4, random.Random(0))
    assert Counter(e.trainset for e in chosen) == {"big": 2, "small": 2}
    assert [e.id for e in stratified_sample(pool, 4, random.Random(0))] == [e.id for e in chosen]
    assert [e.id for e in stratified_sample(pool, 4, random.Random(1))] != [e.id for e in chosen]
    assert len(stratified_sample(pool[:3], 10, random.Random(0))) == 3  # never more than there are


def test_pooled_real_sets_give_every_kind_and_every_set_a_short_answer_demo(shared_data: Path) -> None:
    pool = Pool.load(["hotpotqa", "musique", "multihop-rag"])
    labeled = [e for e in pool.examples("train", None) if e.get("passages")]  # what the short answer can learn from
    present = {answer_kind(e.short_answer) for e in labeled}
    assert present == {"yes/no", "name", "figure", "date", "list"}
    chosen = stratified_sample(labeled, 5, random.Random(0))
    assert {answer_kind(e.short_answer) for e in chosen} == present
    assert {e.trainset for e in chosen} == {"hotpotqa", "musique", "multihop-rag"}
    assert any(e.trainset == "multihop-rag" and answer_kind(e.short_answer) == "yes/no"
               for e in stratified_sample(labeled, 10, random.Random(0)))
