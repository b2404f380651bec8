"""Web search: the real Tavily client against a fake Tavily on 127.0.0.1, the snapshot provider, selection."""

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

from conftest import JsonServer, free_port, scratch_config
from dspy_rag.errors import UserError
from dspy_rag.index import Index
from dspy_rag.pipelines.baseline import BaselineRAG
from dspy_rag.retrieval import Retriever
from dspy_rag.web import SnapshotSearch, TavilySearch, WebSearchError, web_search

KEY = "tvly-SENTINEL-0123456789"
RESULTS = {"results": [
    {"title": "AMD ships MI300X", "url": "https://example.com/mi300x", "content": "AMD's MI300X accelerator ships.",
     "score": 0.9, "published_date": "2024-08-28T10:00:00Z", "raw_content": None},
    {"title": "Untitled", "url": "https://example.com/other", "content": "Other text.", "score": 0.2},
]}


class FakeTavily(JsonServer):
    """Answers /search with a chosen status (and `error` message), body and delay."""

    def __init__(self) -> None:
        self.status, self.body, self.error, self.delay = 200, RESULTS, "nope", 0.0
        super().__init__()

    def answer(self, payload: dict[str, object]) -> tuple[int, object]:
        time.sleep(self.delay)
        return self.status, self.body if self.status == 200 else {"detail": {"error": self.error}}


@pytest.fixture()
def tavily() -> Iterator[FakeTavily]:
    fake = FakeTavily()
    yield fake
    fake.close()


def test_results_become_passages_with_url_and_date(tavily: FakeTavily) -> None:
    passages = TavilySearch(KEY, tavily.url).search("AMD accelerator strategy", 5)
    headers, payload = tavily.requests[0]
    assert payload["query"] == "AMD accelerator strategy" and payload["max_results"] == 5
    assert headers["Authorization"] == f"Bearer {KEY}"
    assert [p.source for p in passages] == ["https://example.com/mi300x", "https://example.com/other"]
    assert passages[0].section == "AMD ships MI300X (2024-08-28)" and passages[1].section == "Untitled"
    assert passages[0].text == "AMD's MI300X accelerator ships." and passages[0].score == 0.9


@pytest.mark.parametrize("status, reason", [(401, "API key"), (429, "usage limit"), (403, "refused"),
                                            (500, "Tavily failed")])
def test_provider_errors_become_one_line_reasons(tavily: FakeTavily, status: int, reason: str) -> None:
    tavily.status = status
    with pytest.raises(WebSearchError, match=reason) as error:
        TavilySearch(KEY, tavily.url).search("anything", 3)
    assert "\n" not in str(error.value) and KEY not in str(error.value)


def test_a_slow_provider_times_out(tavily: FakeTavily) -> None:
    tavily.delay = 3.0
    with pytest.raises(WebSearchError, match="within 1 s"):
        TavilySearch(KEY, tavily.url, timeout=1.0).search("anything", 3)


def test_no_network_is_reported() -> None:
    with pytest.raises(WebSearchError, match="cannot reach Tavily"):
        TavilySearch(KEY, f"http://127.0.0.1:{free_port()}").search("anything", 3)


def test_provider_selection(tmp_path: Path) -> None:
    config = scratch_config(tmp_path)
    assert web_search(config) is None and web_search(config, "off") is None
    with pytest.raises(UserError, match="TAVILY_API_KEY"):
        web_search(config, "tavily")
    with pytest.raises(UserError, match="does not exist"):
        web_search(config, str(tmp_path / "absent.jsonl"))
    with pytest.raises(UserError, match="snapshot_path"):
        web_search(scratch_config(tmp_path, **{"web.provider": "snapshot"}))
    keyed = scratch_config(tmp_path, **{"web.provider": "tavily", "web.tavily_api_key": KEY})
    assert isinstance(web_search(keyed), TavilySearch)


def write_snapshot(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    records = [
        {"url": "https://news.example/chips", "title": "Chip rivals", "published_at": "2023-11-02T08:00:00+00:00",
         "content": "AMD unveiled the MI300X to compete with NVIDIA's H100 in data centers."},
        {"url": "https://news.example/weather", "title": "Storm week", "published_at": "2023-12-01T08:00:00+00:00",
         "content": "Heavy snow closed roads across Norway for three days."},
    ]
    (folder / "articles.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    (folder / "post.md").write_text("---\nblog_title: \"Running LLMs on MI300X\"\ndate: 28 Aug 2024\n---\n\n"
                                    "# Intro\nWe reproduce our MLPerf inference results on MI300X with vLLM.\n")
    return folder


def test_the_snapshot_is_indexed_once_and_searched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSPY_RAG_CACHE", str(tmp_path / "cache"))
    snapshot = write_snapshot(tmp_path / "snap")
    search = SnapshotSearch(snapshot, scratch_config(tmp_path))
    top = search.search("snow in Norway", 2)
    assert top[0].source == "https://news.example/weather" and top[0].section == "Storm week (2023-12-01)"
    mlperf = search.search("MLPerf inference vLLM", 1)[0]
    assert mlperf.section == "Running LLMs on MI300X (28 Aug 2024)" and "blog_title" not in mlperf.text
    catalog = search.index.catalog_path
    stamp = catalog.stat().st_mtime_ns
    assert SnapshotSearch(snapshot, scratch_config(tmp_path)).index.catalog_path.stat().st_mtime_ns == stamp
    (snapshot / "articles.jsonl").write_text('{"url": "https://x", "content": "Fresh news."}\n')
    assert SnapshotSearch(snapshot, scratch_config(tmp_path)).index.catalog_path != catalog  # new content, new index


def test_a_malformed_snapshot_line_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSPY_RAG_CACHE", str(tmp_path / "cache"))
    (tmp_path / "bad.jsonl").write_text('{"url": "https://x", "content": "ok"}\n{"title": "no url"}\n')
    with pytest.raises(UserError, match="bad.jsonl:2"):
        SnapshotSearch(tmp_path / "bad.jsonl", scratch_config(tmp_path))


def test_empty_files_pipes_and_dangling_links_in_a_snapshot_folder_are_passed_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSPY_RAG_CACHE", str(tmp_path / "cache"))
    snapshot = write_snapshot(tmp_path / "snap")
    (snapshot / "empty.md").write_text("")
    os.mkfifo(snapshot / "pipe.txt")
    (snapshot / "gone.html").symlink_to(tmp_path / "nowhere.html")
    search = SnapshotSearch(snapshot, scratch_config(tmp_path))
    assert search.search("snow in Norway", 1)[0].source == "https://news.example/weather"
    assert {s for s in search.index.sources} == {"https://news.example/chips", "https://news.example/weather",
                                                 str((snapshot / "post.md").resolve())}


def test_the_real_snapshot_finds_the_rocm_post(shared_data: Path) -> None:
    search = SnapshotSearch(shared_data / "web-snapshot", scratch_config(Path("unused")))
    top = search.search("AMD Instinct MI300X MLPerf inference results", 3)
    assert any("rocm-blog-2024-08-28" in p.source for p in top)


@pytest.mark.slow
def test_the_baseline_answers_from_documents_when_the_web_fails(tenk_index: Index, tavily: FakeTavily) -> None:
    tavily.status = 429
    reply = {"evidence": "", "answer": "From the filing [1].", "cited_passages": [1], "short_answer": "filing"}
    with dspy.context(lm=DummyLM([reply], adapter=dspy.JSONAdapter()), adapter=dspy.JSONAdapter()):
        result = BaselineRAG(Retriever(tenk_index), 4, TavilySearch(KEY, tavily.url))(question="AMD competition")
    assert "usage limit" in result.web_error
    assert len(result.passages) == 4 and all(p.source.endswith("nvda-20230129.htm") for p in result.passages)


@pytest.mark.slow
def test_the_baseline_fuses_web_results_with_documents(tenk_index: Index, tavily: FakeTavily) -> None:
    reply = {"evidence": "", "answer": "Both [1].", "cited_passages": [1], "short_answer": "both"}
    with dspy.context(lm=DummyLM([reply], adapter=dspy.JSONAdapter()), adapter=dspy.JSONAdapter()):
        result = BaselineRAG(Retriever(tenk_index), 4, TavilySearch(KEY, tavily.url))(question="AMD competition")
    sources = [p.source for p in result.passages]
    assert result.web_error is None
    assert "https://example.com/mi300x" in sources and any(s.endswith("nvda-20230129.htm") for s in sources)


@pytest.mark.parametrize("body, reason", [
    ({"results": "not a list"}, "results is str"),
    ({"results": {"url": "https://example.com"}}, "results is dict"),
    ({"results": ["https://example.com"]}, "a result is str"),
    ({"results": [{"url": "https://example.com", "score": "high"}]}, "score is 'high'"),
    ({"results": [{"url": "https://example.com", "score": float("nan")}]}, "score is nan"),
    ({"results": [{"url": 7}]}, "url is int"),
    ({"results": [{"url": "https://example.com", "content": ["a"]}]}, "content is list"),
    ([1, 2], "could not read it"),
])
def test_a_malformed_reply_is_a_reported_web_failure(tavily: FakeTavily, body: object, reason: str) -> None:
    tavily.body = body
    with pytest.raises(WebSearchError, match=reason) as error:
        TavilySearch(KEY, tavily.url).search("anything", 3)
    assert str(error.value).startswith("Tavily's reply is malformed") and "\n" not in str(error.value)


@pytest.mark.parametrize("body", [{"results": None}, {}, {"results": []}])
def test_a_reply_without_results_finds_nothing(tavily: FakeTavily, body: object) -> None:
    tavily.body = body
    assert TavilySearch(KEY, tavily.url).search("anything", 3) == []
