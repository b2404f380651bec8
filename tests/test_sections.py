"""Section names as a planner writes them reach the sections the index holds."""

import pytest

from dspy_rag.sections import match_sections

TITLES = [
    "Front matter", "Item 1. Business", "Item 1A. Risk Factors", "Item 1B. Unresolved Staff Comments",
    "Item 2. Properties", "Item 7. Management's Discussion and Analysis of Financial Condition and Results of Operations",
    "Item 7A. Quantitative and Qualitative Disclosures about Market Risk",
    "Item 8. Financial Statements and Supplementary Data", "Item 15. Exhibit and Financial Statement Schedules",
]


@pytest.mark.parametrize("wanted, expected", [
    ("Item 1A", ["Item 1A. Risk Factors"]),
    ("item 1a.", ["Item 1A. Risk Factors"]),
    ("ITEM 1A. RISK FACTORS", ["Item 1A. Risk Factors"]),
    ("Item 1A. Risk Factors", ["Item 1A. Risk Factors"]),
    ("risk factors", ["Item 1A. Risk Factors"]),
    ("Risk factor", ["Item 1A. Risk Factors"]),
    ("Item 1", ["Item 1. Business"]),  # not 1A or 1B
    ("Item 7A", ["Item 7A. Quantitative and Qualitative Disclosures about Market Risk"]),
    ("MD&A", [TITLES[5]]),
    ("management's discussion", [TITLES[5]]),
    ("market risk", [TITLES[6]]),
    ("financial statements", [TITLES[7], TITLES[8]]),
])
def test_loose_names_reach_the_section(wanted: str, expected: list[str]) -> None:
    assert match_sections(wanted, TITLES) == expected


@pytest.mark.parametrize("wanted", ["Item 99", "", "the", "cybersecurity governance"])
def test_names_that_match_nothing_give_nothing(wanted: str) -> None:
    assert match_sections(wanted, TITLES) == []


def test_an_item_number_wins_over_words() -> None:
    # "Item 2" decides even though "risk" would point at Item 1A and 7A.
    assert match_sections("Item 2 risk", TITLES) == ["Item 2. Properties"]
