"""The web page in a real headless Chromium against a real uvicorn server answering with the scripted LM, its
token set: the page asks for the token, the research steps show while the run is still under way, a citation
opens the passage it cites, the unsupported sentence is marked, and /history plots the ledger as an SVG; and
the answer's tokens, where a stream carries them, written as a draft the answer replaces. Screenshots go to
test-artifacts/ (the path is printed). Without Chromium, chromedriver or selenium the tests skip here and fail
in CI."""

import asyncio
import json
import logging
import shutil
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from serving import environment, on_uvicorn, recompiled, serving

from conftest import FACTS, REPLIES, FakeLM, in_ci, scratch_config
from dspy_rag.index import Index

TOKEN = "tok-5d1e94b7c03a68f2"
QUESTION = "What was NVIDIA's Data Center revenue in fiscal 2023, and what are the key risks?"
RISKS = "What are the key risks?"
RISK = "Competition from 9,999 rivals is a key risk."  # a figure no passage states: the answer flags it
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1280,900"]
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
WAIT = 20  # seconds for the page to show what it waits for


class TwoSteps(FakeLM):
    """The scripted LM planning a second step, on the key risks, whose finding states a figure no passage holds."""

    def reply(self, payload: dict[str, Any]) -> str:
        if "`finding`" in (prompt := payload["messages"][-1]["content"]) and RISKS in prompt:
            return json.dumps({"finding": RISK})
        return super().reply(payload)


PLAN = {"steps": [{"sub_question": sub_question, "tool": "search_docs", "keywords": [], "section": None,
                   "justification": "asked"} for sub_question in ("Data Center revenue in fiscal 2023?", RISKS)]}


INSTALL = {"chromium": "apt-get install chromium", "chromedriver": "apt-get install chromium-driver",
           "selenium": "pip install -e '.[dev]'"}


def browser_parts() -> tuple[str, str]:
    """Chromium and chromedriver; a skip saying what to install (a failure in CI, which installs them)."""
    found = {name: shutil.which(name) for name in ("chromium", "chromedriver")}
    missing = [name for name, path in found.items() if path is None]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium")
    if missing:
        reason = "the browser test needs " + ", ".join(f"{name} ({INSTALL[name]})" for name in missing)
        pytest.fail(reason) if in_ci() else pytest.skip(reason)
    return found["chromium"], found["chromedriver"]


@pytest.fixture()
def browser(tmp_path: Path) -> Iterator[Any]:
    """A fresh headless Chromium driven by selenium, its console log kept."""
    chromium, chromedriver = browser_parts()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(chromedriver))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture()
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, TwoSteps]]:
    """The server over the facts and a ledger of two compiles, its token set, and its scripted LM."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # as `dspy-rag serve` runs: no price list fetched
    lm = TwoSteps({**REPLIES, "`steps`": PLAN, "`decision`": {"decision": "CONTINUE", "reason": "a step is left"}})
    (tmp_path / "facts.md").write_text(FACTS)
    Index(scratch_config(tmp_path)).ingest([str(tmp_path / "facts.md")])
    recompiled(tmp_path / "artifacts")
    try:
        # the reflection on: its finding for the risks step is the sentence no passage states
        with serving({**environment(tmp_path, lm), "DSPY_RAG_SERVE_TOKEN": TOKEN},
                     **{"retrieval.reranker": "none", "roles.reflection": True}) as url:
            yield url, lm
    finally:
        lm.close()


def until(driver: Any, check: Callable[[], Any]) -> Any:
    """What `check` returns, once it is something, within WAIT seconds."""
    from selenium.webdriver.support.wait import WebDriverWait

    return WebDriverWait(driver, WAIT).until(lambda _: check())


def shown(driver: Any, css: str) -> list[Any]:
    """The page's elements matching `css`, once there are any."""
    from selenium.webdriver.common.by import By

    return until(driver, lambda: driver.find_elements(By.CSS_SELECTOR, css))


def screenshot(driver: Any, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The page as test-artifacts/`name`, its path printed."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    driver.save_screenshot(str(path))
    with capsys.disabled():
        print(f"\nscreenshot: {path}")


def test_the_page_streams_the_research_opens_a_citation_marks_a_flag_and_plots_the_history(
        browser: Any, site: tuple[str, TwoSteps], capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    from selenium.webdriver.common.by import By

    caplog.set_level(logging.INFO)
    url, lm = site
    browser.get(url + "/")  # the page itself needs no token
    ask = browser.find_element(By.CSS_SELECTOR, "#ask button")
    browser.find_element(By.NAME, "question").send_keys(QUESTION)
    ask.click()
    assert "needs its token" in shown(browser, "#status.error")[0].text

    browser.find_element(By.ID, "token").send_keys(TOKEN)
    lm.hold_after = 1  # the plan is made; the next call waits: the steps so far must show before any answer
    ask.click()
    shown(browser, "#steps .step[data-kind=step]")
    kinds = [step.get_attribute("data-kind") for step in browser.find_elements(By.CSS_SELECTOR, "#steps .step")]
    assert [kind for kind in kinds if kind != "progress"] == ["sources", "plan", "step"]
    assert not browser.find_elements(By.CSS_SELECTOR, "#answer *")
    lm.release.set()

    answer = shown(browser, "#answer .answer")[0]
    assert browser.find_element(By.CSS_SELECTOR, "#answer .short").text == "$15.01 billion"
    kinds = [step.get_attribute("data-kind") for step in browser.find_elements(By.CSS_SELECTOR, "#steps .step")]
    assert kinds.count("step") == kinds.count("finding") == 2 and kinds[-1] == "decision"
    [flagged] = answer.find_elements(By.CSS_SELECTOR, "mark.flagged")
    assert flagged.text == "Competition from 9,999 rivals is a key risk [facts]."
    assert "the cited passage does not state this" in flagged.get_attribute("title")

    answer.find_element(By.CSS_SELECTOR, ".citation").click()
    passage = shown(browser, "#passage .text")[0]
    assert passage.text == FACTS.strip()
    assert browser.find_element(By.CSS_SELECTOR, "#passage .where").text.endswith("facts.md")
    screenshot(browser, "research-page.png", capsys)

    browser.get(url + "/history")  # the token stays with the tab, not in the address
    points = shown(browser, "#plot svg circle.point")
    assert len(points) == 3 and browser.find_element(By.CSS_SELECTOR, "#plot .lineage").get_attribute(
        "data-lineage") == "v1"
    heights = [float(point.get_attribute("cy")) for point in points]
    assert heights == sorted(heights, reverse=True)  # 0.40, 0.50, 0.55: each higher on the page
    screenshot(browser, "history-page.png", capsys)

    assert TOKEN not in browser.current_url
    console = browser.get_log("browser")
    # The one failure the console may show is the refusal of the question asked without the token.
    assert [e for e in console if e["level"] == "SEVERE" and "status of 401" not in e["message"]] == [], console
    assert TOKEN not in str(console) + capsys.readouterr().err + caplog.text


def test_the_answers_tokens_show_as_a_draft_that_the_answer_replaces(browser: Any) -> None:
    """Against a stream of `token` events cut mid-event, as a server streaming the answer's tokens sends them."""
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse
    from selenium.webdriver.common.by import By

    from dspy_rag.server.page import add_page

    app, answered = FastAPI(), threading.Event()
    add_page(app)
    document = {"answer": "The revenue was $15.01 billion.", "short_answer": "$15.01 billion", "citations": [],
                "flagged": [], "seconds": 0.5, "lm_calls": 7}

    async def stream() -> AsyncIterator[str]:
        for text in ("The revenue ", "was ", "$15.01 billion."):
            yield f"event: token\ndata: {json.dumps({'text': text})}\n\n"
        for piece in ("event: tok", 'en\ndata: {"text": " Dr', 'aft."}\n', "\n"):  # one event in four reads
            await asyncio.sleep(0.05)
            yield piece
        await asyncio.to_thread(answered.wait, WAIT)
        yield f"event: answer\ndata: {json.dumps(document)}\n\n"

    app.add_api_route("/v1/research", lambda: StreamingResponse(stream(), media_type="text/event-stream"),
                      methods=["POST"])
    with on_uvicorn(app) as url:
        browser.get(url + "/")
        browser.find_element(By.NAME, "question").send_keys("What was the revenue?")
        browser.find_element(By.CSS_SELECTOR, "#ask button").click()
        draft = shown(browser, "#answer .draft")[0]
        until(browser, lambda: draft.text.endswith("Draft."))
        assert draft.text == "The revenue was $15.01 billion. Draft."
        answered.set()
        assert shown(browser, "#answer .answer")[0].text == "The revenue was $15.01 billion."
        assert not browser.find_elements(By.CSS_SELECTOR, "#answer .draft")
