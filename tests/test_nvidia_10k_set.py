"""The hand-made NVIDIA fiscal-2023 10-K question set, checked against the filing as the tool reads it."""

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from dspy_rag.documents import Document, parse, read_bytes
from dspy_rag.trainsets.formats import Question, load_questions

SET = Path(__file__).resolve().parents[1] / "trainsets" / "nvidia_10k.jsonl"
KINDS = {"single-section", "multi-section", "10k+web"}
BLOG = "rocm-blog-2024-08-28-mlperf-inference-mi300x.md"  # in the web snapshot


def normalise(text: str) -> str:
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    return " ".join(text.split()).casefold()


def supported(phrase: str, text: str) -> bool:
    """`phrase` occurs in `text` as a whole token run: '1%' is not found inside '21%', nor '250' inside '1,250'."""
    pattern = r"(?<![\w.,])" + re.escape(normalise(phrase)) + r"(?![\w]|[.,]\d)"
    return re.search(pattern, normalise(text)) is not None


def answered(question: Question, text: str) -> bool:
    return any(supported(candidate, text) for candidate in (question.answer, *question.aliases))


@pytest.fixture(scope="module")
def questions() -> list[Question]:
    kind, items = load_questions(SET)
    assert kind == "jsonl"
    return items


@pytest.fixture(scope="module")
def sections(tenk_filing: Path) -> dict[str, str]:
    document: Document = parse(read_bytes(tenk_filing), str(tenk_filing), "html")
    return {s.title: document.text[s.start:s.end] for s in document.sections}


@pytest.fixture(scope="module")
def web_pages(shared_data: Path) -> dict[str, str]:
    """Web evidence by title and by URL: the ROCm blog post and the news articles of the offline snapshot."""
    snapshot = shared_data / "web-snapshot"
    pages: dict[str, str] = {}
    blog = (snapshot / BLOG).read_text(encoding="utf-8")
    title = re.search(r"^# (.+)$", blog, re.M)
    assert title
    pages[title.group(1).strip()] = pages[BLOG] = blog
    with (snapshot / "multihop_rag_articles.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            article = json.loads(line)
            pages[article["title"]] = pages[article["url"]] = f"{article['title']}\n{article['content']}"
    return pages


def test_matcher_rejects_near_misses() -> None:
    text = "we had 26,196 employees; a 1% excise tax; the rate was 21%; $1,250 due"
    assert supported("26,196", text) and supported("1%", text) and supported("$1,250", text)
    assert not supported("26,197", text)
    assert not supported("2,196", text)
    assert not supported("250", text)
    assert not supported("$1,25", text)


def test_set_is_large_with_unique_ids_and_known_fields(questions: list[Question]) -> None:
    assert len(questions) >= 40
    ids = Counter(q.id for q in questions)
    assert not [i for i, n in ids.items() if n > 1], "duplicate ids"
    for q in questions:
        assert q.question.strip() and q.answer.strip(), q.id
        assert q.kind in KINDS, q.id
        assert q.split in {"train", "dev"}, q.id
        assert q.gold_sections, q.id


def test_every_kind_is_in_both_splits(questions: list[Question]) -> None:
    present = {(q.kind, q.split) for q in questions}
    assert {(kind, split) for kind in KINDS for split in ("train", "dev")} <= present


def test_gold_sections_exist_in_the_filing(questions: list[Question], sections: dict[str, str]) -> None:
    missing = {(q.id, title) for q in questions for title in q.gold_sections if title not in sections}
    assert not missing, f"gold sections the reader does not produce: {sorted(missing)}"


def test_gold_plans_search_real_sections_and_the_web_where_the_question_needs_it(
        questions: list[Question], sections: dict[str, str]) -> None:
    planned = [q for q in questions if q.plan]
    assert {q.kind for q in planned} == {"multi-section", "10k+web"} and all(q.split == "train" for q in planned)
    for q in planned:
        assert len(q.plan) >= 2 and all(step["sub_question"].endswith("?") for step in q.plan), q.id
        assert {s["section"] for s in q.plan if s.get("section")} <= set(sections), q.id
        tools = {step["tool"] for step in q.plan}
        assert tools == ({"search_docs", "search_web"} if q.kind == "10k+web" else {"search_docs"}), q.id


def test_single_section_answers_appear_in_their_section(questions: list[Question], sections: dict[str, str]) -> None:
    singles = [q for q in questions if q.kind == "single-section"]
    assert singles
    unsupported = [q.id for q in singles
                   if len(q.gold_sections) != 1 or not answered(q, sections.get(q.gold_sections[0], ""))]
    assert not unsupported, f"answer not found in its gold section: {unsupported}"


def test_multi_section_answers_appear_in_a_gold_section(questions: list[Question], sections: dict[str, str]) -> None:
    multis = [q for q in questions if q.kind == "multi-section"]
    assert multis
    assert all(len(set(q.gold_sections)) >= 2 for q in multis)
    unsupported = [q.id for q in multis if not any(answered(q, sections.get(t, "")) for t in q.gold_sections)]
    assert not unsupported, f"answer found in none of the gold sections: {unsupported}"


def test_web_questions_name_real_pages_holding_the_answer(questions: list[Question], sections: dict[str, str],
                                                          web_pages: dict[str, str]) -> None:
    web = [q for q in questions if q.kind == "10k+web"]
    assert len(web) >= 8
    for q in web:
        assert q.gold_web, q.id
        unknown = [page for page in q.gold_web if page not in web_pages]
        assert not unknown, f"{q.id}: not in the web snapshot: {unknown}"
        evidence = [web_pages[page] for page in q.gold_web] + [sections[t] for t in q.gold_sections]
        assert any(answered(q, text) for text in evidence), f"{q.id}: answer in neither the 10-K nor the web page"
