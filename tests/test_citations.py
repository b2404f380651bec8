"""Citations: [n] markers become section labels, and no citation is ever invented."""

import pytest

from dspy_rag.citations import (
    Citation,
    answer_overlap,
    check_citations,
    citation_validity,
    number_passages,
    resolve,
    restates,
    sentences,
    with_marker,
)
from dspy_rag.retrieval import Passage

MDNA = "Item 7. Management's Discussion and Analysis"
RISK = "Item 1A. Risk Factors"
URL = "https://example.com/news/nvidia-q4"

PASSAGES = (
    Passage("c1", "Data Center revenue for fiscal year 2023 was $15.01 billion, up 41% from fiscal year 2022.",
            "/data/nvidia/nvda-20230129.htm", MDNA, 0.9),
    Passage("c2", "Supply constraints and export controls could harm our business.",
            "/data/nvidia/nvda-20230129.htm", RISK, 0.8),
    Passage("c3", "Analysts expect gaming to recover in the second half.", URL, "", 0.5),
)


def cited_ids(citations: list[Citation]) -> list[str]:
    return [c.chunk_id for c in citations]


@pytest.mark.parametrize(
    ("answer", "text", "ids"),
    [
        ("Revenue was $15.01 billion [1].", f"Revenue was $15.01 billion [{MDNA}].", ["c1"]),
        ("Growth and risk [1, 2].", f"Growth and risk [{MDNA}] [{RISK}].", ["c1", "c2"]),
        ("Growth and risk [2;1].", f"Growth and risk [{RISK}] [{MDNA}].", ["c2", "c1"]),
        ("Risk [2]. Revenue [1]. Risk again [2].", f"Risk [{RISK}]. Revenue [{MDNA}]. Risk again [{RISK}].",
         ["c2", "c1"]),
        ("Gaming may recover [3].", f"Gaming may recover [{URL}].", ["c3"]),
    ],
    ids=["single", "pair", "semicolon", "repeated", "url-label"],
)
def test_markers_become_labels(answer: str, text: str, ids: list[str]) -> None:
    rendered, citations = resolve(answer, PASSAGES)
    assert rendered == text
    assert cited_ids(citations) == ids


def test_citation_fields() -> None:
    _, (citation,) = resolve("Risk [2].", PASSAGES)
    assert citation == Citation(RISK, "/data/nvidia/nvda-20230129.htm", RISK, "c2")


@pytest.mark.parametrize(
    ("answer", "ids"),
    [("Revenue grew [9].", []), ("Revenue grew [0].", []), ("Revenue grew [1, 9].", ["c1"]), ("[4] [2]", ["c2"])],
)
def test_numbers_naming_no_passage_are_dropped(answer: str, ids: list[str]) -> None:
    rendered, citations = resolve(answer, PASSAGES)
    assert cited_ids(citations) == ids
    assert "[9]" not in rendered and "[0]" not in rendered and "[4]" not in rendered


def test_number_passages_headers() -> None:
    assert number_passages(PASSAGES) == [
        f"[1] nvda-20230129.htm | {MDNA}\n{PASSAGES[0].text}",
        f"[2] nvda-20230129.htm | {RISK}\n{PASSAGES[1].text}",
        f"[3] {URL} | {URL}\n{PASSAGES[2].text}",
    ]


def test_sentences_keep_markers_written_after_the_full_stop() -> None:
    assert sentences("Revenue was $15.01 billion. [1] Export controls could harm it [2]. Done.") == [
        "Revenue was $15.01 billion [1].", "Export controls could harm it [2].", "Done."]


def test_check_citations_flags_each_way_a_sentence_can_fail() -> None:
    answer = ("Data Center revenue was $15.01 billion [1]. Data Center revenue was $16 billion [1]. "
              "Export controls could harm the business [7]. Gaming will surely double next year. "
              "The passages do not mention AMD.")
    reasons = [c.reason for c in check_citations(answer, PASSAGES)]
    assert reasons == [None, "the cited passage does not state this", "cites a passage that was not retrieved",
                       "no citation", None]
    assert citation_validity(check_citations(answer, PASSAGES)) == pytest.approx(1 / 3)


def test_a_citation_to_a_passage_on_another_topic_is_not_support() -> None:
    [check] = check_citations("Supply constraints and export controls could harm our business [1].", PASSAGES)
    assert check.supported_by == [] and check.reason == "the cited passage does not state this"


@pytest.mark.parametrize(("sentence", "restated"), [
    ("The key risks include increased costs and lost market share [2].", True),  # markers do not count as words
    ("The key risks include increased costs and lost market share and revenue.", True),
    ("AMD launched the MI300X with 192GB of memory.", False),
    ("", False),
])
def test_a_sentence_restates_a_finding_when_most_of_its_words_are_in_it(sentence: str, restated: bool) -> None:
    finding = "The key risks related to competition include increased costs, lost market share and revenue."
    assert restates(sentence, finding) is restated


def test_a_marker_goes_before_the_full_stop() -> None:
    assert with_marker("Revenue rose.", 3) == "Revenue rose [3]."
    assert with_marker("Revenue rose", 3) == "Revenue rose [3]"


@pytest.mark.parametrize(("answer", "text", "share"), [
    ("$15.01 billion", "Data Center revenue was $15.01 billion, up 41%.", 1.0),
    ("$15.01 billion", "Total revenue was $26.97 billion.", 0.0),  # "billion" alone does not hold the figure
    ("15,010 million", "revenue of 15,010 million", 1.0),
    ("Jensen Huang", "Jensen founded the company.", 0.5),
    ("the", "the", None),
])
def test_a_text_holds_a_short_answer_only_with_all_its_figures(answer: str, text: str, share: float | None) -> None:
    assert answer_overlap(answer, text) == share
