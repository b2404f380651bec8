"""Independent plan steps researched at once, against a real OpenAI-compatible server on 127.0.0.1 that answers
scripted completions and counts the requests it holds at once: the steps overlap, up to the limit, and the
trajectory says what one step at a time says; the LM-call budget holds across threads. Then (slow) against
llama.cpp's own server, serving the local model."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import FakeLM, ingested, llama_cpp_server
from dspy_rag.api import Research
from dspy_rag.config import Config, load_config
from dspy_rag.evals import bench_parallel_steps
from dspy_rag.index import Index
from dspy_rag.models import build_lm
from dspy_rag.pipelines.step_batch import batch_size
from dspy_rag.signatures import Step

FACTS = ("# Data Center\nNVIDIA's Data Center revenue for fiscal year 2023 was $15.01 billion, up 41% from a year "
         "ago.\n\n# Gaming\nGaming revenue for fiscal year 2023 was $9.07 billion, down 27% from a year ago.\n\n"
         "# Automotive\nAutomotive revenue for fiscal year 2023 was $903 million, up 60% from a year ago.\n")
QUESTION = "What did each of NVIDIA's segments earn in fiscal year 2023?"
# Each step: its sub-question, the query written for it, the strategy chosen for that query, its finding.
STEPS = [("How much did the Data Center segment earn?", "Data Center revenue fiscal 2023", "vector",
          "Data Center revenue was $15.01 billion."),
         ("How much did the Gaming segment earn?", "Gaming revenue fiscal 2023", "keyword",
          "Gaming revenue was $9.07 billion."),
         ("How much did the Automotive segment earn?", "Automotive revenue fiscal 2023", "hybrid",
          "Automotive revenue was $903 million.")]
PLAN = {"steps": [{"sub_question": q, "tool": "search_docs", "keywords": [], "section": None,
                   "justification": "one segment"} for q, *_ in STEPS]}


class ScriptedLM(FakeLM):
    """Replies by the field a prompt asks for and the step it is about."""

    def __init__(self) -> None:
        super().__init__({})
        self.delay = 0.2  # long enough for the steps' first requests to meet at the server

    def reply(self, payload: dict[str, Any]) -> str:
        return json.dumps(self.scripted(payload["messages"][-1]["content"]))

    @staticmethod
    def scripted(prompt: str) -> dict[str, Any]:
        if "`steps`" in prompt:
            return PLAN
        if "`decision`" in prompt:
            return {"decision": "CONTINUE", "reason": "scripted"}
        for sub_question, query, strategy, finding in STEPS:
            if "`query`" in prompt and sub_question in prompt:
                return {"query": query}
            if "`strategy`" in prompt and query in prompt:
                return {"strategy": strategy, "reason": "scripted"}
            if "`finding`" in prompt and sub_question in prompt:
                return {"finding": finding}
        return {"short_answer": "$15.01 billion"}  # the short answer's plain prompt


@pytest.fixture(autouse=True)
def _offline_model_prices(monkeypatch: pytest.MonkeyPatch) -> None:
    """LiteLLM's packaged price list: fetching it first tries the network, seconds lost offline."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture(scope="module")
def facts_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ingested(tmp_path_factory.mktemp("facts"), "segments.md", FACTS)


@pytest.fixture()
def server() -> Iterator[ScriptedLM]:
    lm = ScriptedLM()
    yield lm
    lm.close()


def settings(index: Path, api_base: str, **overrides: Any) -> Config:
    return load_config(overrides={"index.path": index, "lm.model": "openai/fake", "lm.api_base": api_base,
                                  "retrieval.reranker": "none", **overrides}, environ={})


def research(config: Config, server: ScriptedLM) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """`ask --json`'s document for the question, and the events streamed meanwhile; the server's count restarts."""
    server.peak, server.requests = 0, []
    events: list[tuple[str, str]] = []
    opened = Research.open(config, artifact="none", on_event=lambda text, kind=None: events.append((kind, text)))
    return opened.run(QUESTION).to_json(), [(kind, text) for kind, text in events if kind]


def content(step: dict[str, Any]) -> dict[str, Any]:
    """What a step found and how, without its timing or the decision after it."""
    return {k: v for k, v in step.items() if k not in ("seconds", "decision", "decision_reason")}


def test_independent_steps_overlap_up_to_the_limit_and_trace_as_one_by_one(facts_index: Path,
                                                                          server: ScriptedLM) -> None:
    one_by_one, events_one_by_one = research(settings(facts_index, server.url + "/v1", **{"lm.parallel_steps": 1}),
                                             server)
    assert server.peak == 1
    for limit in (3, 2):
        at_once, events = research(settings(facts_index, server.url + "/v1", **{"lm.parallel_steps": limit}), server)
        assert 1 < server.peak <= limit
        trajectory = at_once["trajectory"]
        assert trajectory["parallel_steps"] == limit
        assert [content(s) for s in trajectory["steps"]] == [content(s) for s in one_by_one["trajectory"]["steps"]]
        assert [s["query"] for s in trajectory["steps"]] == [query for _, query, _, _ in STEPS]
        assert at_once["answer"] == one_by_one["answer"] and at_once["short_answer"] == "$15.01 billion"
        # the calls and the events in plan order, as one step at a time makes them; only the decisions differ
        research_calls = [(c["module"], c["step"]) for c in trajectory["calls"] if c["step"] is not None]
        assert research_calls == [(c["module"], c["step"]) for c in one_by_one["trajectory"]["calls"]
                                  if c["step"] is not None]
        assert [e for e in events if e[0] != "decision"] == [e for e in events_one_by_one if e[0] != "decision"]
        # the policy decides after each batch: once after three steps at once, twice for batches of two and one
        policy = [c["module"] for c in trajectory["calls"]].count("policy")
        assert policy == {3: 1, 2: 2}[limit] and [s["decision"] for s in trajectory["steps"]][-1] == "FINISH"
        # every request counted once, its tokens with it, though the steps called from several threads
        assert trajectory["lm_calls"] == at_once["lm_calls"] == len(server.requests)
        assert trajectory["tokens"] == 120 * len(server.requests)
    assert [c["module"] for c in one_by_one["trajectory"]["calls"]].count("policy") == 3


def test_steps_at_once_never_pass_the_lm_call_budget(facts_index: Path, server: ScriptedLM) -> None:
    config = settings(facts_index, server.url + "/v1", **{"lm.parallel_steps": 3, "budgets.max_lm_calls": 6})
    document, _ = research(config, server)
    trajectory = document["trajectory"]
    # the plan, then research calls up to the one kept for the answer, then the answer: six requests, no more
    assert len(server.requests) == trajectory["lm_calls"] == 6 and trajectory["calls"][-1]["module"] == "answer"
    assert "LM-call budget (6) spent" in trajectory["stopped_early"] and document["short_answer"] == "$15.01 billion"
    assert [s["index"] for s in trajectory["steps"]] == list(range(len(trajectory["steps"])))


def test_the_embedded_local_model_researches_one_step_at_a_time(facts_index: Path) -> None:
    from dspy_rag.pipelines.programs import build_program

    config = load_config(overrides={"index.path": facts_index, "retrieval.reranker": "none"}, environ={})
    assert config.lm.model.startswith("local/") and config.lm.parallel_steps > 1
    assert build_program("deep", config, Index(config), None).parallel_steps == 1  # built, not loaded: no model


def test_a_batch_ends_before_a_step_that_builds_on_an_earlier_answer() -> None:
    steps = [Step(sub_question=q, tool="search_docs") for q in
             ("Who founded NVIDIA?", "Where was the answer of step 1 born?", "What did Gaming earn?", "And #2?")]
    assert [batch_size(steps[n:], 4) for n in range(4)] == [1, 2, 1, 1]
    assert batch_size(steps[2:3] * 3, 2) == 2


def test_the_limit_is_checked_where_it_is_set(tmp_path: Path) -> None:
    from dspy_rag.errors import UserError

    with pytest.raises(UserError, match=r"lm.parallel_steps.*greater than or equal to 1"):
        load_config(overrides={"lm.parallel_steps": 0}, environ={})
    with pytest.raises(UserError, match="DSPY_RAG_LM_PARALLEL_STEPS"):
        load_config(environ={"DSPY_RAG_LM_PARALLEL_STEPS": "many"})


@pytest.mark.slow
def test_steps_at_once_against_llama_cpps_own_server(facts_index: Path) -> None:
    """llama-cpp-python's server (0.3.36) has no parallel slots: it answers one request at a time behind a lock,
    so the steps' requests queue there. The run must still be coherent, its steps overlapping in time (each one's
    wall time spans the others' calls), and its answer the model's. The plan is the benchmark's fixed one."""
    with llama_cpp_server() as base:
        config = load_config(overrides={"index.path": facts_index, "lm.model": "openai/qwen", "lm.api_base": base,
                                        "retrieval.reranker": "none"}, environ={})
        run = bench_parallel_steps.research_once(config, Index(config), 3, build_lm(config.lm))
    trajectory = run["trajectory"]
    assert run["parallel_steps"] == 3 and run["steps"] == 3 and run["stopped_early"] is None
    assert [s["sub_question"] for s in trajectory["steps"]] == [s.sub_question for s in bench_parallel_steps.STEPS]
    steps_called = [c["step"] for c in trajectory["calls"] if c["step"] is not None]
    assert steps_called == sorted(steps_called) and set(steps_called) == {0, 1, 2}
    assert sum(s["seconds"] for s in trajectory["steps"]) > run["seconds"]  # one at a time, they would fit in it
    assert run["short_answer"].strip()
