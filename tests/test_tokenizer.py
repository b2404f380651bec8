"""The BM25 tokenizer: the same words must give the same tokens whatever their spelling on the page."""

import pytest

from dspy_rag.tokenizer import tokenize


@pytest.mark.parametrize(
    ("written", "plain"),
    [
        ("revenue,", "revenue"),
        ("(revenue).", "revenue"),
        ("REVENUE", "revenue"),
        ("Revenue", "revenue"),
        ("risks", "risk"),
        ("NVIDIA\u2019s", "NVIDIA's"),
    ],
    ids=["comma", "brackets", "upper", "capitalised", "plural", "curly-apostrophe"],
)
def test_variants_tokenize_alike(written: str, plain: str) -> None:
    tokens = tokenize(written)
    assert tokens and tokens == tokenize(plain)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The revenue of the company", ["revenu", "compani"]),
        ("Risks related to our business", ["risk", "relat", "busi"]),
        ("running", ["run"]),
    ],
)
def test_stopwords_dropped_and_words_stemmed(text: str, expected: list[str]) -> None:
    assert tokenize(text) == expected


@pytest.mark.parametrize(
    ("text", "number"),
    [("Data Center revenue was $15.01 billion.", "15.01"), ("a 0.5% rise", "0.5"), ("release 3.10.2 shipped", "3.10.2")],
)
def test_numbers_stay_one_token(text: str, number: str) -> None:
    tokens = tokenize(text)
    assert number in tokens
    assert not set(number.split(".")) & set(tokens), "no fragment of the number is a token of its own"


@pytest.mark.parametrize("text", ["", "   \n\t", "the of and", "It is what it was.", "!!! ... ---"])
def test_nothing_to_index(text: str) -> None:
    assert tokenize(text) == []
