"""Conflicts and source tiers: figures and their slots read in code, the disagreements of hand-made document
pairs found and none in the real 10-K, each source's tier, and both programs end to end (`ask --json`) with a
scripted LM: both values and both sources in the answer, cited, the higher-tier one preferred, the guard off."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import REPLIES, FakeLM, invoke, run_cli
from dspy_rag.chunking import chunk_document
from dspy_rag.citations import check_citations
from dspy_rag.config import TierConfig, TierRule
from dspy_rag.conflicts import conflicts
from dspy_rag.documents import kind_of, parse, read_bytes
from dspy_rag.evals.evaluate import ABLATIONS, Switch
from dspy_rag.figures import figures
from dspy_rag.pipelines.conflict_note import ConflictGuard, with_conflicts
from dspy_rag.retrieval import Passage
from dspy_rag.tiers import tier_of

QUESTION = "What was Acme's revenue in fiscal year 2023?"
FILING = ("# Item 7. Management's Discussion and Analysis\n\n"
          "Acme's revenue for fiscal year 2023 was $12.4 million, up 8% from fiscal year 2022.\n\n"
          "Gross margin for fiscal year 2023 was 41%.\n")
PRESS = "Acme Corp. today reported revenue of $14.0 million for fiscal year 2023, a record for the company."
README_QUESTION = "What was NVIDIA's Data Center revenue in fiscal year 2023?"


def passage(text: str, source: str, n: int = 0) -> Passage:
    return Passage(f"{Path(source).name}:{n}", text, source, "", 1.0)


def slot_of(text: str) -> tuple[str, ...]:
    (figure,) = figures(text)
    return figure.slot.metric


@pytest.mark.parametrize(("text", "metric"), [
    ("Data Center revenue for fiscal year 2023 was $15.01 billion, up 41% from fiscal year 2022.",
     ("data", "center", "revenue")),
    ("Acme Corp. reported revenue of $14.0 million for fiscal year 2023.", ("revenue",)),
    ("In fiscal 2023, non-GAAP gross margin was 59.2%.", ("non-gaap", "gross", "margin")),
    ("Acme's chief executive officer is Jane Doe.", ("chief", "executive", "officer")),
])
def test_a_figure_is_read_with_the_metric_words_before_it(text: str, metric: tuple[str, ...]) -> None:
    assert slot_of(text) == metric


@pytest.mark.parametrize("text", [
    "Revenue was $26.97 billion.",  # no year: as likely another year's figure
    "Data Center | $ 15,005 | $ 10,613 | 41 %",  # a table row: no subject words
    "During fiscal year 2023, we returned $10.44 billion to shareholders.",  # what was done, not a quantity's value
    "Revenue for fiscal year 2023 was flat compared with $26.91 billion",  # the comparison's figure
    "As of January 29, 2023, we had 26,196 employees.",  # a date as a point of reference
])
def test_a_figure_without_a_readable_slot_is_never_compared(text: str) -> None:
    assert figures(text) == []


@pytest.mark.parametrize(("first", "second", "disagree"), [
    ("Acme's revenue for fiscal 2023 was $12.4 million.", PRESS, True),
    ("Acme's revenue for fiscal 2023 was $14.0 million.", PRESS, False),  # the same figure
    ("Acme's revenue for fiscal 2023 was $14,020 thousand.", PRESS, False),  # the same, rounded differently
    ("Acme's revenue for fiscal 2022 was $12.4 million.", PRESS, False),  # another year
    ("Acme's service revenue for fiscal 2023 was $2.1 million.", PRESS, False),  # another metric
    ("Acme's revenue grew by $1.6 million in fiscal 2023.", PRESS, False),  # a change, not the level
    ("Zenith's revenue for fiscal 2023 was $12.4 million.", "Acme's revenue for fiscal 2023 was $14.0 million.",
     False),  # another company
    ("Acme's revenue grew 12% in fiscal 2023.", "In fiscal 2023 Acme's revenue grew 15%.", True),
    ("Acme's IPO closed on March 3, 2023.", "Acme's IPO closed on March 5, 2023.", True),
    ("Acme's chief executive officer is Jane Doe.", "Acme's CEO, John Roe, spoke.", True),
    ("Acme's chief executive officer is Jane Doe.", "Zenith's chief executive officer is John Roe.", False),
])
def test_document_pairs_disagree_only_on_the_same_slot(first: str, second: str, disagree: bool) -> None:
    question = "What were Acme's revenue, growth, IPO date and chief executive officer in fiscal 2023?"
    found = conflicts(question, [passage(first, "/d/a.md"), passage(second, "/d/b.md")], [1, 1])
    assert bool(found) == disagree


def test_a_slot_the_question_does_not_ask_about_is_no_conflict() -> None:
    pair = [passage("Acme's revenue for fiscal 2023 was $12.4 million.", "/d/a.md"), passage(PRESS, "/d/b.md")]
    assert conflicts("What was Acme's gross margin in fiscal 2023?", pair, [1, 1]) == []


@pytest.fixture(scope="module")
def tenk_passages(tenk_filing: Path) -> list[Passage]:
    document = parse(read_bytes(tenk_filing), str(tenk_filing), kind_of(tenk_filing))
    return [Passage(c.id, c.text, c.source, c.section, 0.0) for c in chunk_document(document)]


def test_the_real_10k_has_no_false_conflict(tenk_passages: list[Passage]) -> None:
    """Every chunk of the filing, asked about every quantity whose slot the filing states: the figures read agree
    where their slots are the same (the 10-K repeats its headline figures across sections)."""
    read = [f for p in tenk_passages for f in figures(p.text)]
    assert any(f.text == "$15.01 billion" and f.slot.metric == ("data", "center", "revenue") for f in read)
    every_quantity = " ".join(f.slot.metric[-1] for f in read)
    assert conflicts(every_quantity, tenk_passages, [1] * len(tenk_passages)) == []
    assert conflicts(README_QUESTION, tenk_passages, [1] * len(tenk_passages)) == []


@pytest.mark.parametrize(("source", "kind", "tier"), [
    ("/home/me/acme-10k.md", "markdown", 1),
    ("https://ir.acme.com/10k.htm", "html", 1),  # ingested by the user: their document, whatever its address
    ("https://www.sec.gov/Archives/acme-10k.htm", "web", 2),
    ("https://investor.acme.com/news/q4", "web", 2),
    ("https://www.reuters.com/business/acme", "web", 3),
    ("https://someblog.example/acme", "web", 4),
])
def test_each_source_gets_its_default_tier(source: str, kind: str, tier: int) -> None:
    assert tier_of(source, kind, TierConfig()) == tier


def test_configured_rules_tier_by_path_domain_and_kind_first_match_wins() -> None:
    tiers = TierConfig(rules=[TierRule(tier=3, path="*/drafts/*"), TierRule(tier=2, domain="acme.com"),
                              TierRule(tier=1, kind="pdf"), TierRule(tier=2, kind="document")], default=5)
    assert tier_of("/d/drafts/memo.pdf", "pdf", tiers) == 3
    assert tier_of("https://www.acme.com/results", "web", tiers) == 2
    assert tier_of("/d/filing.pdf", "pdf", tiers) == 1 and tier_of("/d/notes.md", "markdown", tiers) == 2
    assert tier_of("https://www.reuters.com/x", "web", tiers) == 5


def test_the_conflict_sentences_pass_the_citation_check_and_prefer_the_higher_tier() -> None:
    evidence = [passage(PRESS, "https://www.reuters.com/acme"), passage(FILING, "/d/acme-10k.md")]
    kinds = {"/d/acme-10k.md": "markdown"}
    short, found, fired = ConflictGuard(TierConfig())(QUESTION, "$14.0 million", evidence, kinds)
    assert short == "$12.4 million" and [v.tier for v in found[0].values] == [1, 3]
    draft = with_conflicts("Acme's revenue for fiscal year 2023 was $12.4 million [2].", found, evidence)
    assert "This answer prefers $12.4 million from acme-10k.md" in draft and "reuters.com/acme (news)" in draft
    assert [c.reason for c in check_citations(draft, evidence)] == [None] * 5
    assert [f.changed for f in fired] == ["answered $12.4 million instead", "stated each value with its source"]
    assert ConflictGuard(TierConfig(), on=False)(QUESTION, "$14.0 million", evidence, kinds) == (
        "$14.0 million", [], [])


def test_an_attribution_to_another_source_is_still_checked_against_the_cited_passage() -> None:
    evidence = [passage(PRESS, "/d/press.md"), passage(FILING, "/d/acme-10k.md")]
    assert check_citations("According to acme-10k.md (the user's documents), it is $14.0 million [1].",
                           evidence)[0].reason == "the cited passage does not state this"


def test_conflicts_is_a_guard_eval_can_switch_off() -> None:
    assert "conflicts" in ABLATIONS and Switch("conflicts").part == "guards"


SNAPSHOT = {"url": "https://www.reuters.com/business/acme-record", "title": "Acme reports record results",
            "published_at": "2023-03-01", "content": PRESS}


@pytest.fixture()
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLM]:
    """The filing and the press release ingested (the press release also as a web snapshot), and a scripted LM
    whose short answer is the press release's figure."""
    server = FakeLM({**REPLIES, "Question:\n": {"short_answer": "$14.0 million"}})
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DSPY_RAG_CACHE", str(tmp_path / "cache"))
    (tmp_path / "acme-10k.md").write_text(FILING)
    (tmp_path / "press-release.md").write_text(f"# Acme reports record results\n\n{PRESS}\n")
    (tmp_path / "press.jsonl").write_text(json.dumps(SNAPSHOT) + "\n")
    yield server
    server.close()


def ask_json(*args: str) -> dict[str, Any]:
    result = invoke("ask", "--json", *args, QUESTION)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("pipeline", ["baseline", "deep"])
def test_two_documents_that_disagree_are_both_in_the_answer_cited(acme: FakeLM, pipeline: str) -> None:
    assert invoke("ingest", "acme-10k.md", "press-release.md").returncode == 0
    result = ask_json("--pipeline", pipeline)
    answer = result["answer"]
    assert result["short_answer"] == "$14.0 million"  # the same tier: the answer prefers neither
    assert "The sources disagree on revenue in 2023" in answer and "prefers" not in answer
    assert "According to press-release.md (the user's documents), it is $14.0 million [" in answer
    assert "According to acme-10k.md (the user's documents), it is $12.4 million [Item 7." in answer
    assert result["flagged"] == []
    (conflict,) = result["conflicts"]
    values = {(v["value"], Path(v["source"]).name, v["section"], v["tier"]) for v in conflict["values"]}
    assert values == {("$12.4 million", "acme-10k.md", "Item 7. Management's Discussion and Analysis", 1),
                      ("$14.0 million", "press-release.md", "Acme reports record results", 1)}
    assert {v["id"] for v in conflict["values"]} <= {r["id"] for r in result["retrieved"]}
    assert any(g["guard"] == "conflicts" for g in result["guards"])
    assert result["single_source"] is None  # the web is off: no second source was looked for


@pytest.mark.parametrize("pipeline", ["baseline", "deep"])
def test_the_filing_outranks_a_news_page_on_the_web_and_the_answer_says_so(acme: FakeLM, pipeline: str) -> None:
    assert invoke("ingest", "acme-10k.md").returncode == 0
    result = ask_json("--pipeline", pipeline, "--web", "press.jsonl")
    assert result["short_answer"] == "$12.4 million"  # the scripted LM said the news page's $14.0 million
    assert "Acme's revenue for fiscal year 2023 was $12.4 million" in result["answer"].split("[")[0]  # the lead
    assert "According to https://www.reuters.com/business/acme-record (news), it is $14.0 million" in result["answer"]
    assert "This answer prefers $12.4 million from acme-10k.md, which ranks above the other sources by tier" in (
        result["answer"])
    assert result["flagged"] == []
    (conflict,) = result["conflicts"]
    assert conflict["preferred"] == "$12.4 million"
    assert [v["tier"] for v in conflict["values"]] == [1, 3]
    assert result["single_source"] == {"claim": "$12.4 million", "source": str(Path("acme-10k.md").resolve())}


@pytest.mark.parametrize("pipeline", ["baseline", "deep"])
def test_with_the_web_on_an_answer_only_one_source_states_is_flagged_single_source(
        acme: FakeLM, pipeline: str, tmp_path: Path) -> None:
    """The filing's $12.4 million, confirmed by an investor page on the web: two sources; two pages of one site
    that restate the news page's figure are still one."""
    confirming = {**SNAPSHOT, "url": "https://investor.acme.com/results", "content": FILING}
    (tmp_path / "two.jsonl").write_text(json.dumps(SNAPSHOT) + "\n" + json.dumps(confirming) + "\n")
    assert invoke("ingest", "acme-10k.md").returncode == 0
    assert ask_json("--pipeline", pipeline, "--web", "two.jsonl")["single_source"] is None
    acme.replies["Question:\n"] = {"short_answer": "a record for the company"}
    mirrored = {**SNAPSHOT, "url": "https://www.reuters.com/business/acme-record-2", "content": PRESS + " Shares rose."}
    (tmp_path / "mirror.jsonl").write_text(json.dumps(SNAPSHOT) + "\n" + json.dumps(mirrored) + "\n")
    flagged = ask_json("--pipeline", pipeline, "--web", "mirror.jsonl")["single_source"]
    assert flagged is not None and flagged["claim"] == "a record for the company"
    assert flagged["source"].startswith("https://www.reuters.com/business/acme-record")


@pytest.mark.parametrize("pipeline", ["baseline", "deep"])
def test_with_the_guard_off_the_answer_names_one_value(acme: FakeLM, pipeline: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    assert invoke("ingest", "acme-10k.md", "press-release.md").returncode == 0
    monkeypatch.setenv("DSPY_RAG_GUARDS_CONFLICTS", "false")
    result = ask_json("--pipeline", pipeline)
    assert result["conflicts"] == [] and "disagree" not in result["answer"] and "12.4" not in result["answer"]


@pytest.mark.slow
def test_the_conflict_case_on_the_local_model(tmp_path: Path) -> None:
    """The issue's case on the real local model: both figures and both sources in the answer."""
    (tmp_path / "acme-10k.md").write_text(FILING)
    (tmp_path / "press-release.md").write_text(f"# Acme reports record results\n\n{PRESS}\n")
    assert run_cli("ingest", "acme-10k.md", "press-release.md", cwd=tmp_path).returncode == 0
    for pipeline in ("baseline", "deep"):
        ask = run_cli("ask", "--pipeline", pipeline, "--json", QUESTION, cwd=tmp_path)
        assert ask.returncode == 0, ask.stderr
        result = json.loads(ask.stdout)
        for shown in ("$12.4 million", "$14.0 million", "acme-10k.md", "press-release.md"):
            assert shown in result["answer"], (pipeline, shown)
        assert len(result["conflicts"]) == 1
