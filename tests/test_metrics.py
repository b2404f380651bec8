"""Answer and evidence metrics against values computed by hand."""

import pytest

from dspy_rag.evals.metrics import (
    AnswerScores,
    answer_contains,
    citation_validity,
    evidence_recall,
    exact_match,
    normalize_answer,
    score_answer,
    section_recall,
    token_f1,
    weighted_score,
)


@pytest.mark.parametrize("text, expected", [
    ("The Eiffel Tower!", "eiffel tower"),
    ("  A  cat,\tan   apple\n", "cat apple"),
    ("Theater of the absurd", "theater of absurd"),  # articles only as whole words
    ("U.S.", "us"),
    ("Apple\u2019s \u201cshares\u201d \u2014 rose", "apples shares rose"),  # Unicode punctuation too
    ("26,974", "26974"),
    ("1,234,567.5", "1234567.5"),
    ("$26.97 billion", "26.97 billion"),
    ("\u20ac5 and \u00a37", "5 and 7"),
    ("It ended in 2019.", "it ended in 2019"),  # a sentence's full stop is not a decimal point
    ("", ""),
])
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_a_decimal_point_is_not_dropped() -> None:
    # SQuAD's script turns both into "2697"; here they are different figures.
    assert normalize_answer("26.97") != normalize_answer("2697")
    assert exact_match("26.97", "2697") == 0.0


@pytest.mark.parametrize("prediction, gold", [
    ("Eiffel Tower", "the eiffel tower."),
    ("26,974", "26974"),
    ("$26.97 billion", "26.97 billion"),
    ("US$ 1,000,000", "us 1000000"),
])
def test_exact_match_after_normalisation(prediction: str, gold: str) -> None:
    assert exact_match(prediction, gold) == 1.0


def test_exact_match_misses_and_aliases() -> None:
    assert exact_match("Eiffel Tower in Paris", "Eiffel Tower") == 0.0
    assert exact_match("NYC", "New York City") == 0.0
    assert exact_match("NYC", "New York City", aliases=["Big Apple", "nyc."]) == 1.0


@pytest.mark.parametrize("prediction, gold, expected", [
    # pred [eiffel tower in paris], gold [eiffel tower]: common 2, P=2/4, R=2/2, F1 = 2*(1/2)*1/(3/2) = 2/3.
    ("the Eiffel Tower in Paris", "Eiffel Tower", 2 / 3),
    # pred [paris paris london], gold [paris]: multiplicity caps common at 1; P=1/3, R=1, F1 = 1/2.
    ("Paris, Paris, London", "Paris", 1 / 2),
    # pred [new york new york], gold [new york city]: common new+york = 2; P=2/4, R=2/3, F1 = 4/7.
    ("New York, New York", "New York City", 4 / 7),
    ("Eiffel Tower", "the eiffel tower", 1.0),
    ("Louvre", "Eiffel Tower", 0.0),
    ("$26,974 million", "26974 million", 1.0),
    # [26.97 billion] vs [2697 billion]: only "billion" is shared; P=R=1/2.
    ("26.97 billion", "2697 billion", 1 / 2),
    ("", "Paris", 0.0),
    ("Paris", "", 0.0),
    ("the", "a", 1.0),  # both empty after normalisation
])
def test_token_f1(prediction: str, gold: str, expected: float) -> None:
    assert token_f1(prediction, gold) == expected


def test_token_f1_takes_the_best_alias() -> None:
    # [big apple city] vs [new york city]: common 1, F1 = 2/6; vs alias [big apple]: common 2, F1 = 4/5.
    assert token_f1("big apple city", "New York City", aliases=["the Big Apple"]) == 4 / 5
    assert token_f1("big apple city", "New York City") == 1 / 3
    assert token_f1("NYC", "New York City", aliases=("nyc",)) == 1.0


@pytest.mark.parametrize("prediction, gold, expected", [
    ("yes", "no", 0.0),
    ("No.", "no", 1.0),
    ("yes it is", "yes", 0.0),  # would be 1/2 without the closed-answer rule
    ("no", "no way", 0.0),  # would be 2/3 without it
    ("noanswer", "no answer", 0.0),
    ("noanswer", "noanswer", 1.0),
])
def test_token_f1_yes_no_noanswer(prediction: str, gold: str, expected: float) -> None:
    assert token_f1(prediction, gold) == expected


def test_a_closed_alias_does_not_block_an_open_one() -> None:
    assert token_f1("yes indeed", "yes", aliases=["yes indeed"]) == 1.0


@pytest.mark.parametrize("prediction, gold, aliases, expected", [
    ("Revenue was $26.97 billion in 2023.", "26.97 billion", (), 1.0),
    ("Revenue was 126.97 million.", "26.97", (), 0.0),  # whole tokens, not substrings
    ("It is the Eiffel Tower.", "Eiffel Tower", (), 1.0),
    ("Tower Eiffel", "Eiffel Tower", (), 0.0),  # a run in order, not a bag
    ("Revenue rose to 26,974 million", "$26974 million", (), 1.0),
    ("They call it the Big Apple.", "New York City", ["Big Apple"], 1.0),
    ("They call it the Big Apple.", "New York City", [], 0.0),
    ("Yes, it did.", "yes", (), 1.0),
    ("Yes or no, hard to say.", "yes", (), 0.0),  # a hedge earns nothing
    ("Yes or no, hard to say.", "no", (), 0.0),
    ("Anything at all", "the", (), 0.0),  # an empty gold is contained nowhere
    ("", "Paris", (), 0.0),
])
def test_answer_contains(prediction: str, gold: str, aliases: list[str], expected: float) -> None:
    assert answer_contains(prediction, gold, aliases) == expected


def test_a_string_as_aliases_is_refused() -> None:
    # "Paris" as aliases would compare single letters; "p" would then be contained in "p ...".
    with pytest.raises(TypeError):
        exact_match("p", "London", aliases="Paris")
    with pytest.raises(TypeError):
        evidence_recall("abc", ["a"])


def test_evidence_recall() -> None:
    assert evidence_recall(["a", "b", "c"], ["b", "d"]) == 1 / 2
    assert evidence_recall(["a", "b", "c"], ["c", "a", "b"]) == 1.0
    assert evidence_recall(["b"], ["b", "b", "d"]) == 1 / 2  # distinct gold ids
    assert evidence_recall([], ["a"]) == 0.0
    assert evidence_recall(["a"], []) is None


TITLES = [
    "Item 1A. Risk Factors",
    "Item 7. Management's Discussion and Analysis of Financial Condition and Results of Operations",
]


@pytest.mark.parametrize("gold", [
    "Item 1A", "item 1a.", "ITEM 1A. RISK FACTORS", "risk factors", "Risk factor",
    "MD&A", "Item 7", "management's discussion",
    "Part I, Item 1A", "Item 7. MD&A",  # the item number decides though the words differ
])
def test_section_recall_names_sections_tolerantly(gold: str) -> None:
    assert section_recall(TITLES, [gold]) == 1.0


def test_section_recall_counts_gold_sections() -> None:
    # "Item 1A" and "MD&A" are hit; "Item 8" is not.
    assert section_recall(TITLES, ["Item 1A", "MD&A", "Item 8. Financial Statements"]) == 2 / 3
    # A retrieved section named loosely still hits a gold full title, the alias included.
    assert section_recall(["risk factors", "MD&A"], TITLES) == 1.0
    assert section_recall(TITLES, []) is None
    assert section_recall([], ["Item 1A"]) == 0.0


@pytest.mark.parametrize("retrieved, gold", [
    ("Item 1A. Risk Factors", "Item 1"),  # 1 is not 1A
    ("Item 1A. Risk Factors", "Item 7A. Market risk"),  # the item numbers decide, not the shared "risk"
    ("Item 7A. Quantitative and Qualitative Disclosures about Market Risk", "risk factors"),  # half the words
    ("Item 1A. Risk Factors", "the"),  # no words at all
])
def test_section_recall_misses(retrieved: str, gold: str) -> None:
    assert section_recall([retrieved], [gold]) == 0.0


def test_citation_validity() -> None:
    assert citation_validity(["a", "x"], {"a", "b"}) == 1 / 2
    assert citation_validity(["a", "a", "a", "x"], ["a", "b"]) == 1 / 2  # repeats count once
    assert citation_validity(["a", "b"], ("a", "b", "c")) == 1.0
    assert citation_validity(["x"], []) == 0.0
    assert citation_validity([], ["a"]) is None


def test_score_answer() -> None:
    scores = score_answer(
        "It is the Eiffel Tower in Paris.", "Eiffel Tower", aliases=["La Tour Eiffel"],
        retrieved_ids=["p1", "p2", "p3"], gold_ids=["p2", "p9"], cited_ids=["p2", "p7"],
    )
    # pred [it is eiffel tower in paris] vs [eiffel tower]: common 2, F1 = 2*2/(6+2) = 1/2.
    assert scores == AnswerScores(em=0.0, f1=1 / 2, contains=1.0, evidence_recall=1 / 2, citation_validity=1 / 2)


def test_score_answer_without_evidence() -> None:
    scores = score_answer("Eiffel Tower", "the Eiffel Tower")
    assert scores == AnswerScores(em=1.0, f1=1.0, contains=1.0, evidence_recall=None, citation_validity=None)


SCORES = AnswerScores(em=0.0, f1=0.5, contains=1.0, evidence_recall=0.25, citation_validity=None)


def test_weighted_score() -> None:
    # (3*0.5 + 1*0.25) / 4 = 1.75/4
    assert weighted_score(SCORES, {"f1": 3, "evidence_recall": 1}) == 1.75 / 4
    assert weighted_score(SCORES, {"contains": 1}) == 1.0
    assert weighted_score(SCORES, {"em": 1, "f1": 0}) == 0.0


def test_weighted_score_renormalises_over_present_components() -> None:
    # citation_validity is None: its weight goes, the rest re-normalise to (2*0.5 + 2*1.0) / 4 = 3/4.
    assert weighted_score(SCORES, {"f1": 2, "contains": 2, "citation_validity": 4}) == 3 / 4
    assert weighted_score(SCORES, {"citation_validity": 1}) == 0.0  # nothing left to score


@pytest.mark.parametrize("weights", [{"F1": 1}, {"f1": -1, "em": 2}, {"f1": 0}, {}])
def test_weighted_score_refuses_bad_weights(weights: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        weighted_score(SCORES, weights)
