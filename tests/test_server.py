"""`dspy-rag serve`: a real uvicorn server on 127.0.0.1 over a real index, answering with the scripted LM that
`ask` uses in the other tests: health, a streamed run equal to `ask --json`, the OpenAI client, a full line, a
client that leaves, the token guard and hostile input."""

import json
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from serving import environment, recompiled, serving

from conftest import (
    CALLS_PER_RUN,
    FACTS,
    REPLIES,
    SHORT_ANSWER_PROMPT,
    FakeLM,
    invoke,
    scratch_config,
    without_times,
)
from dspy_rag.config import load_config
from dspy_rag.index import Index
from dspy_rag.server.runs import Run

QUESTION = "What was NVIDIA's Data Center revenue in fiscal 2023?"
TOKEN = "tok-9f2c71e0a4b8d35e"
Event = tuple[str, Any]


@pytest.fixture(scope="module")
def served(folder: Path, script: FakeLM) -> Iterator[str]:
    """One server for the module's tests: starting one opens the index and the reranker, which takes a while."""
    with serving(environment(folder, script), **{"serve.parallel": 1}) as url:  # one run at a time: the line
        yield url


@pytest.fixture()
def fake_lm(script: FakeLM, folder: Path, monkeypatch: pytest.MonkeyPatch) -> FakeLM:
    """The served scripted LM with its faults and requests reset, and `ask` pointed at it and the served index."""
    for name, value in environment(folder, script).items():
        monkeypatch.setenv(name, value)
    script.requests.clear()
    script.delay, script.hold_after, script.status = 0.0, None, 200
    script.release.clear()
    return script


def sse(lines: Iterator[str]) -> Iterator[Event]:
    """The (event, data) pairs of a server-sent event stream."""
    kind, data = "message", []
    for line in lines:
        if line.startswith("event: "):
            kind = line[len("event: "):]
        elif line.startswith("data: "):
            data.append(line[len("data: "):])
        elif not line and data:
            yield kind, json.loads("\n".join(data))
            kind, data = "message", []


def assert_refused(response: httpx.Response, status: int | None = None) -> str:
    """A 4xx with one line of JSON, {"error": reason}, and no traceback; returns the reason."""
    assert 400 <= response.status_code < 500 if status is None else response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    [line] = response.text.splitlines()
    body = json.loads(line)
    assert list(body) == ["error"] and isinstance(body["error"], str) and "\n" not in body["error"]
    assert "Traceback" not in response.text
    return body["error"]


def assert_refused_5xx(response: httpx.Response, status: int) -> str:
    """A server-side failure: the status, one line of JSON and no traceback; returns the reason."""
    assert response.status_code == status and "Traceback" not in response.text, response.text
    [line] = response.text.splitlines()
    return json.loads(line)["error"]


def test_health_names_the_model_index_and_reranker(served: str, folder: Path) -> None:
    health = httpx.get(served + "/health").json()
    assert health["status"] == "ready" and health["problem"] is None
    assert health["model"] == "openai/fake" and health["index"] == str(folder / "index") and health["chunks"] == 1
    assert health["reranker"] == "minilm" and health["artifact"] is None  # no artifact is compiled for openai/fake
    assert health["queue"] == {"running": 0, "parallel": 1, "waiting": 0, "room": 8}


def test_a_streamed_run_shows_asks_steps_in_order_and_ends_with_asks_json(served: str, fake_lm: FakeLM) -> None:
    with httpx.stream("POST", served + "/v1/research", json={"question": QUESTION}, timeout=60) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = list(sse(response.iter_lines()))
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "run" and kinds[-1] == "answer" and kinds.count("answer") == 1
    assert [k for k in kinds if k not in ("run", "progress", "token", "answer")] == [
        "sources", "plan", "step", "query", "strategy", "sources", "context", "finding", "decision"]
    # The short answer as the model wrote it, word by word, before the answer that holds it.
    tokens = [data["text"] for kind, data in events if kind == "token"]
    assert tokens == ["$15.01", " billion"] and kinds.index("token") > kinds.index("decision")
    assert "".join(tokens) == events[-1][1]["short_answer"]
    steps = [(kind, data) for kind, data in events[1:-1] if kind != "token"]
    asked = invoke("ask", "--json", QUESTION)
    assert asked.returncode == 0, asked.stderr
    assert without_times(events[-1][1]) == without_times(json.loads(asked.stdout))
    # The steps read as `ask` shows them, line for line, but for the two lines only the command prints.
    shown = [line for line in invoke("ask", QUESTION).stderr.splitlines()
             if not line.startswith(("› loading ", "› deep research over "))]
    streamed = "\n".join(f"› {'' if kind == 'progress' else kind + ' '}{data['text']}" for kind, data in steps)
    assert shown == streamed.splitlines()
    run_id = events[0][1]["id"]
    trajectory = httpx.get(f"{served}/v1/trajectories/{run_id}").json()
    assert trajectory == events[-1][1]["trajectory"]


def test_a_citation_opens_the_indexed_passage_it_names(served: str, fake_lm: FakeLM, folder: Path) -> None:
    answered = httpx.post(served + "/v1/research", json={"question": QUESTION, "stream": False}, timeout=60).json()
    [citation] = answered["citations"]
    passage = httpx.get(f"{served}/v1/passages/{citation['chunk_id']}").json()
    [chunk] = Index(scratch_config(folder)).chunks()
    assert passage == {"id": chunk.id, "source": citation["source"], "section": citation["section"],
                       "text": chunk.text}
    assert "15.01" in passage["text"]
    unknown = "0" * 16 + "-00000"  # the form of an id, of no chunk
    assert "chunk_id" in assert_refused(httpx.get(f"{served}/v1/passages/{unknown}"), 404)


def test_the_history_route_is_history_json(served: str, fake_lm: FakeLM, folder: Path) -> None:
    recompiled(folder / "artifacts")
    shown = httpx.get(served + "/v1/history").json()
    assert shown == json.loads(invoke("history", "--json").stdout)
    assert [lineage["points"] for lineage in shown["lineages"]] == [[], [[0, 0.40], [1, 0.50], [2, 0.55]]]


def test_the_page_is_served_with_its_scripts_and_a_policy_that_runs_no_other(served: str) -> None:
    page = httpx.get(served + "/")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert "script-src 'self'" in page.headers["content-security-policy"]
    linked = re.findall(r'(?:src|href)="([^"]*)"', page.text)
    assert "/page/main.js" in linked and all(link.startswith(("/", "data:")) for link in linked)  # offline
    script = httpx.get(served + "/page/research.js")
    assert script.headers["content-type"] == "text/javascript; charset=utf-8" and "/v1/research" in script.text
    assert httpx.get(served + "/history").text == page.text  # the same document shows its history view there
    assert_refused(httpx.get(served + "/page/page.py"), 404)  # only the page's own files


def test_the_whole_answer_without_a_stream_and_the_baselines_lack_of_a_trajectory(served: str,
                                                                                    fake_lm: FakeLM) -> None:
    answered = httpx.post(served + "/v1/research", json={"question": QUESTION, "pipeline": "baseline",
                                                         "stream": False}, timeout=60)
    assert answered.status_code == 200, answered.text
    document = answered.json()
    assert document["pipeline"] == "baseline" and document["short_answer"] == "$15.01 billion"
    assert without_times(document) == without_times(json.loads(
        invoke("ask", "--json", "--pipeline", "baseline", QUESTION).stdout))
    assert not any(payload.get("stream") for _, payload in fake_lm.requests)  # no stream asked, none made
    assert "deep run" in assert_refused(httpx.get(f"{served}/v1/trajectories/{answered.headers['x-run-id']}"), 404)


def test_the_openai_client_gets_the_cited_answer_whole_and_streamed(served: str, fake_lm: FakeLM) -> None:
    import openai

    client = openai.OpenAI(base_url=served + "/v1", api_key="unused", timeout=60)
    question = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}]
    reply = client.chat.completions.create(model="dspy-rag", messages=question)
    text = reply.choices[0].message.content
    assert reply.model == "dspy-rag" and reply.choices[0].finish_reason == "stop"
    assert text.startswith("**$15.01 billion**") and "Sources:\n- [" in text and "facts.md" in text
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens > 0
    chunks = list(client.chat.completions.create(model="dspy-rag", messages=question, stream=True))
    contents = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert contents[:2] == ["**$15.01", " billion"]  # the short answer as it was written, then the rest
    assert "".join(contents) == text
    assert chunks[-1].choices[0].finish_reason == "stop"
    with pytest.raises(openai.NotFoundError, match="use dspy-rag"):
        client.chat.completions.create(model="gpt-4o", messages=question)


def test_twenty_requests_at_once_are_each_answered_or_turned_away(served: str, fake_lm: FakeLM) -> None:
    fake_lm.delay = 0.05  # each run takes long enough for the line to fill
    results: dict[int, httpx.Response] = {}

    def ask(n: int) -> None:
        results[n] = httpx.post(served + "/v1/research", json={"question": f"Question {n}: Data Center revenue?",
                                                               "stream": False}, timeout=300)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert httpx.get(served + "/health").json()["queue"] == {"running": 0, "parallel": 1, "waiting": 0, "room": 8}
    answered = {n for n, r in results.items() if r.status_code == 200}
    busy = {n for n, r in results.items() if r.status_code == 503}
    assert answered | busy == set(range(20)) and len(answered) >= 9 and busy  # one running and eight waiting
    for n in answered:  # each answer is its own question's
        assert results[n].json()["question"] == f"Question {n}: Data Center revenue?"
        assert results[n].json()["short_answer"] == "$15.01 billion"
    for n in busy:
        assert results[n].headers["retry-after"] == "30" and "busy" in assert_refused(results[n], 503)
    assert len(fake_lm.requests) == CALLS_PER_RUN * len(answered)  # nothing ran for a request turned away


FIGURES = {"Data Center": "$15.01 billion", "Gaming": "$9.07 billion"}  # each segment's revenue in FACTS
RUN_TAG = re.compile(r"\(run (\d+)\)")


def segment(n: int) -> str:
    return "Gaming" if n % 2 else "Data Center"


class ParallelLM(FakeLM):
    """The scripted LM of the other tests, answering each run's question with its own segment's figure (the run's
    tag, "(run n)", is in its question and so in every prompt of its research), in plain text as a served model
    writes a short answer; it counts the calls of each run and the most calls in flight at once."""

    def __init__(self) -> None:
        super().__init__(REPLIES)
        self.calls: Counter[int] = Counter()

    def reply(self, payload: dict[str, Any]) -> str:
        prompt = "\n".join(str(m["content"]) for m in payload["messages"])
        tags = {int(tag) for tag in RUN_TAG.findall(prompt)}
        n = tags.pop() if len(tags) == 1 else -1  # -1: a prompt holding no run's tag, or several runs'
        with self.counting:
            self.calls[n] += 1
        asked = payload["messages"][-1]["content"]
        if "`steps`" in asked:
            plan = json.loads(super().reply(payload))
            plan["steps"][0]["sub_question"] = f"{segment(n)} revenue in fiscal 2023? (run {n})"
            return json.dumps(plan)
        if "`query`" in asked:  # the strategy's prompt holds the query alone
            return json.dumps({"query": f"{segment(n)} revenue fiscal 2023 (run {n})"})
        if SHORT_ANSWER_PROMPT in asked:
            return FIGURES[segment(n)]
        return super().reply(payload)


def test_runs_over_a_served_model_go_in_parallel_up_to_the_limit_each_with_its_own_answer(folder: Path) -> None:
    lm = ParallelLM()
    lm.hold_after = 0  # every call waits until released: the line fills while the first runs are under way
    results: dict[int, list[Event] | httpx.Response] = {}

    def research(url: str, n: int) -> None:
        body = {"question": f"What was {segment(n)} revenue in fiscal 2023? (run {n})"}
        with httpx.stream("POST", url + "/v1/research", json=body, timeout=120) as response:
            if response.status_code == 200:
                results[n] = list(sse(response.iter_lines()))
            else:
                response.read()
                results[n] = response

    try:
        with serving(environment(folder, lm), **{"serve.parallel": 2, "serve.queue": 2}) as url:
            threads = [threading.Thread(target=research, args=(url, n)) for n in range(6)]
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 60
            while not (lm.in_flight == 2 and httpx.get(url + "/health").json()["queue"]["waiting"] == 2
                       and len(results) == 2):
                assert time.monotonic() < deadline, "two runs did not start with two waiting and two turned away"
                time.sleep(0.02)
            lm.release.set()
            for thread in threads:
                thread.join()
    finally:
        lm.close()
    assert lm.peak == 2  # two runs' calls at once, never more than serve.parallel
    assert -1 not in lm.calls  # every prompt held its own run's question alone
    busy = {n for n, r in results.items() if isinstance(r, httpx.Response)}
    assert len(busy) == 2
    for n in busy:
        assert results[n].status_code == 503 and results[n].headers["retry-after"] == "30"
    answered = {n: events for n, events in results.items() if n not in busy}
    places = sorted(tuple(data["position"] for kind, data in events if kind == "queued") for events in answered.values())
    # Two ran at once; the others were told their place as it changed (the second may be let in as both runs end).
    assert places[:3] == [(), (), (1,)] and places[3][0] == 2
    for n, events in answered.items():
        kind, document = events[-1]
        assert kind == "answer" and document["question"].endswith(f"(run {n})")
        assert document["short_answer"] == FIGURES[segment(n)]  # its own question's answer
        assert document["lm_calls"] == lm.calls[n] == CALLS_PER_RUN  # its usage counts its own calls alone
        assert document["trajectory"]["steps"][0]["sub_question"].endswith(f"(run {n})")
        shown = " ".join(data["text"] for kind, data in events if "text" in data)
        assert set(RUN_TAG.findall(shown)) == {str(n)}  # its steps, none of another run's
        tokens = [data["text"] for kind, data in events if kind == "token"]
        assert len(tokens) == 2 and "".join(tokens) == document["short_answer"]  # its own answer's words


def test_the_embedded_model_runs_one_at_a_time_whatever_serve_parallel_says() -> None:
    from dspy_rag.server.app import Server

    embedded = Server(load_config(overrides={"serve.parallel": 4}, environ={}))
    served = Server(load_config(overrides={"serve.parallel": 4, "lm.model": "openai/x"}, environ={}))
    assert (embedded.runs.line.parallel, served.runs.line.parallel) == (1, 4)


def test_waiting_runs_are_told_their_place_in_the_line(served: str, fake_lm: FakeLM) -> None:
    fake_lm.hold_after = 1  # the first run's second LM call waits until released
    first = httpx.Client(timeout=60).stream("POST", served + "/v1/research", json={"question": QUESTION})
    with first as running:
        running_events = sse(running.iter_lines())
        assert next(running_events)[0] == "run"
        while len(fake_lm.requests) < 2:
            time.sleep(0.02)
        places: dict[str, list[int]] = {"second": [], "third": []}

        def wait(name: str) -> None:
            with httpx.stream("POST", served + "/v1/research", json={"question": QUESTION}, timeout=60) as waiting:
                for kind, data in sse(waiting.iter_lines()):
                    if kind == "queued":
                        places[name].append(data["position"])
                    assert kind != "error", data

        second = threading.Thread(target=wait, args=("second",))
        second.start()
        while not places["second"]:
            time.sleep(0.02)
        third = threading.Thread(target=wait, args=("third",))
        third.start()
        while not places["third"]:
            time.sleep(0.02)
        assert httpx.get(served + "/health").json()["queue"]["waiting"] == 2
        fake_lm.release.set()
        assert [kind for kind, _ in running_events][-1] == "answer"
    second.join()
    third.join()
    assert places == {"second": [1], "third": [2, 1]}


def test_a_client_that_leaves_cancels_its_run_at_the_next_step(served: str, fake_lm: FakeLM,
                                                                caplog: pytest.LogCaptureFixture,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    fake_lm.hold_after = 1  # the plan is made; the next call waits until released
    caplog.set_level(logging.INFO, "dspy_rag.server")
    seen_leaving = threading.Event()
    cancel = Run.cancel
    monkeypatch.setattr(Run, "cancel", lambda run: (cancel(run), seen_leaving.set())[0])
    with httpx.stream("POST", served + "/v1/research", json={"question": QUESTION}, timeout=60) as response:
        for kind, _ in sse(response.iter_lines()):
            if kind == "plan":
                break
        while len(fake_lm.requests) < 2:  # the client leaves while the call after the plan is under way
            time.sleep(0.02)
    # The server notices the closed connection in its own time; only then may the held call answer.
    assert seen_leaving.wait(30), "the server did not notice the client leave"
    fake_lm.release.set()  # the held call answers; the run meets its next step and stops there
    deadline = time.monotonic() + 30
    while not any("cancelled" in r.message for r in caplog.records):
        assert time.monotonic() < deadline, "the run was not cancelled"
        time.sleep(0.05)
    assert len(fake_lm.requests) == 2 < CALLS_PER_RUN  # no call after the one under way
    assert httpx.get(served + "/health").json()["queue"]["running"] == 0
    fake_lm.hold_after = None
    answered = httpx.post(served + "/v1/research", json={"question": QUESTION, "stream": False}, timeout=60)
    assert answered.status_code == 200  # the model is free again


def test_a_model_that_fails_is_a_502_in_one_line_and_the_server_goes_on(served: str, fake_lm: FakeLM) -> None:
    fake_lm.status, fake_lm.error = 401, "Incorrect API key provided"
    with httpx.stream("POST", served + "/v1/research", json={"question": QUESTION}, timeout=60) as response:
        kind, data = list(sse(response.iter_lines()))[-1]
    assert kind == "error" and data["status"] == 502 and "API key" in data["error"]
    whole = httpx.post(served + "/v1/research", json={"question": QUESTION, "stream": False}, timeout=60)
    assert "check the model name, its server (lm.api_base) and its API key" in assert_refused_5xx(whole, 502)
    fake_lm.status = 200
    assert httpx.post(served + "/v1/research", json={"question": QUESTION, "stream": False}, timeout=60).is_success


def test_the_token_guards_every_route_and_appears_nowhere(tmp_path: Path, fake_lm: FakeLM, caplog: pytest.LogCaptureFixture,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.INFO)
    (tmp_path / "facts.md").write_text(FACTS)
    Index(scratch_config(tmp_path)).ingest([str(tmp_path / "facts.md")])  # an index of its own: ingest grows it
    (tmp_path / "more.md").write_text("# Gaming\n\nGaming revenue was $9.07 billion.\n")
    monkeypatch.setenv("DSPY_RAG_SERVE_TOKEN", TOKEN)  # where a user keeps it; the server reads it from there
    routes = [("GET", "/health", None), ("POST", "/v1/research", {"question": QUESTION, "stream": False}),
              ("POST", "/v1/chat/completions", {"model": "dspy-rag", "messages": [{"role": "user", "content": "Hi"}]}),
              ("GET", "/v1/trajectories/" + "0" * 32, None), ("POST", "/v1/ingest", {"inputs": ["more.md"]}),
              ("GET", "/v1/passages/" + "0" * 16 + "-00000", None), ("GET", "/v1/history", None),
              ("POST", "/", None), ("GET", "/nowhere", None), ("GET", "/openapi.json", None)]
    with serving({**environment(tmp_path, fake_lm), "DSPY_RAG_SERVE_TOKEN": TOKEN}, **{"serve.ingest": True}) as url:
        for method, path, body in routes:
            for header in ({}, {"authorization": "Bearer wrong"}, {"authorization": TOKEN}):
                refused = httpx.request(method, url + path, json=body, headers=header, timeout=60)
                assert "token" in assert_refused(refused, 401) and refused.headers["www-authenticate"] == "Bearer"
        # The page's own files, which hold no data, are open: a browser loads them, then sends the token.
        page = [httpx.get(url + path) for path in ("/", "/history", "/page/client.js")]
        allowed = {"authorization": f"Bearer {TOKEN}"}
        health = httpx.get(url + "/health", headers=allowed)
        answered = httpx.post(url + "/v1/research", json={"question": QUESTION, "stream": False}, headers=allowed,
                              timeout=120)
        # With serve.ingest on, ingest reads into the index, and the next runs search the new chunks.
        report = httpx.post(url + "/v1/ingest", json={"inputs": ["more.md"]}, headers=allowed, timeout=300)
        again = httpx.post(url + "/v1/research", json={"question": "Gaming revenue?", "stream": False},
                           headers=allowed, timeout=120)
        after = httpx.get(url + "/health", headers=allowed).json()
    assert health.status_code == answered.status_code == report.status_code == again.status_code == 200
    assert [response.status_code for response in page] == [200, 200, 200]
    assert report.json()["added"] == [str(tmp_path / "more.md")] and report.json()["chunks_total"] == 2
    assert len(again.json()["retrieved"]) == 2
    assert after["chunks"] == 2 and after["status"] == "ready"
    assert TOKEN not in health.text + answered.text + report.text and TOKEN not in caplog.text
    shown = invoke("config", "--json").stdout
    assert TOKEN not in shown and json.loads(shown)["serve"]["token"]  # `dspy-rag config` masks it


def test_ingest_is_off_unless_the_configuration_allows_it(served: str, folder: Path) -> None:
    error = assert_refused(httpx.post(served + "/v1/ingest", json={"inputs": [str(folder / "facts.md")]}), 403)
    assert "serve.ingest: true" in error


NUMBERS = st.integers() | st.floats(allow_nan=False, allow_infinity=False)  # what JSON can carry
JSON = st.recursive(st.none() | st.booleans() | NUMBERS | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                max_size=4), max_leaves=10)
NOT_TEXT = st.none() | st.booleans() | NUMBERS | st.lists(st.text(), max_size=3)
# A research body that is wrong somewhere: a question that is not text, a field of the wrong type or unknown.
WRONG_RESEARCH = st.one_of(
    st.fixed_dictionaries({"question": NOT_TEXT}, optional={"pipeline": JSON, "budgets": JSON}),
    st.fixed_dictionaries({"question": st.text(min_size=1, max_size=50)}, optional={
        "pipeline": st.text(max_size=10).filter(lambda p: p not in ("deep", "baseline")) | NOT_TEXT}).filter(
        lambda body: "pipeline" in body),
    st.fixed_dictionaries({"question": st.just(QUESTION), "artifact": st.sampled_from(
        ["../x", "/etc", ".hidden", "a/b", "..", "a" * 200, ""])}),
    st.fixed_dictionaries({"question": st.just(QUESTION), "budgets": st.fixed_dictionaries(
        {"max_steps": st.integers(max_value=0) | st.integers(min_value=5) | st.text()})}),
    st.fixed_dictionaries({"question": st.just(QUESTION), "web": st.text(max_size=20).filter(
        lambda w: w not in ("off", "tavily"))}),
    st.dictionaries(st.text(max_size=10).filter(lambda k: k != "question"), JSON, max_size=3),
    JSON.filter(lambda value: not isinstance(value, dict)),
    st.just({"question": " \t\x01 "}), st.just({"question": "x" * 3000}),
)
TRICKS = st.sampled_from(["../../etc/passwd", "..%2F..%2Fetc%2Fpasswd", "%2e%2e", "/etc/passwd", "..", ".", "%00",
                          "0" * 31 + "g", "0" * 33, "A" * 32, "x" * 5000, "~root", "\\..\\..\\boot.ini",
                          "0" * 16 + "-0000", "0" * 16 + "-00000\n", "0" * 16 + "-00000/../../health", "client.js/.."])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=WRONG_RESEARCH, route=st.sampled_from(["/v1/research", "/v1/chat/completions"]))
def test_a_wrong_body_gets_a_4xx_and_one_line_of_json(served: str, body: Any, route: str) -> None:
    assert_refused(httpx.post(served + route, json=body, timeout=10))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_bytes_that_are_no_json_object_get_a_4xx(served: str, raw: bytes) -> None:
    assert_refused(httpx.post(served + "/v1/research", content=raw, headers={"content-type": "application/json"}))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=TRICKS | st.text(min_size=1, max_size=100),
       route=st.sampled_from(["/v1/trajectories/", "/v1/passages/", "/page/"]))
def test_path_tricks_in_an_id_or_a_file_name_find_nothing(served: str, key: str, route: str) -> None:
    assume(not (route == "/page/" and key in (".", "..")))  # the client itself resolves /page/.. to the page, /
    response = httpx.get(f"{served}{route}{quote(key, safe='')}")
    assert response.status_code in (404, 405) and assert_refused(response)


def test_json_cut_short_is_a_400_saying_so(served: str) -> None:
    cut = httpx.post(served + "/v1/research", content=b'{"question": "Rev', headers={"content-type": "application/json"})
    assert "not valid JSON" in assert_refused(cut, 400)


def test_a_huge_body_is_refused_before_it_is_read(served: str) -> None:
    huge = json.dumps({"question": "x" * 2**20}).encode()
    assert "serve.max_body_bytes" in assert_refused(httpx.post(served + "/v1/research", content=huge), 413)

    def chunked() -> Iterator[bytes]:  # no Content-Length to go by
        for _ in range(40):
            yield b" " * 4096

    assert_refused(httpx.post(served + "/v1/research", content=chunked()), 413)


@pytest.mark.slow
def test_the_real_local_model_researches_the_readme_question_through_the_server(tenk_index: Any) -> None:
    with serving({"DSPY_RAG_INDEX_PATH": str(tenk_index.root)}) as url:
        with httpx.stream("POST", url + "/v1/research", timeout=900,
                          json={"question": "What was NVIDIA's Data Center revenue in fiscal year 2023?"}) as response:
            events = list(sse(response.iter_lines()))
    assert events[-1][0] == "answer" and "15.01" in events[-1][1]["answer"]
    assert {"plan", "step", "decision"} <= {kind for kind, _ in events}
    kinds = [kind for kind, _ in events]  # the short answer as llama.cpp wrote it, in pieces, after the steps
    assert kinds.count("token") > 1 and kinds.index("token") > kinds.index("decision")
