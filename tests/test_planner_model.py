"""A planner model of its own (`lm.planner_model`): the planner's call goes to it and every other call to the
model, the run's LM calls count both, the run store keys runs by it, and eval names its column."""

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM

from conftest import invoke, scratch_config
from dspy_rag.config import Config
from dspy_rag.errors import UserError
from dspy_rag.evals.evaluate import column_settings, columns_of
from dspy_rag.evals.rows import run_question
from dspy_rag.index import Index
from dspy_rag.models import planner_lm
from dspy_rag.pipelines.deep import DeepResearch
from dspy_rag.retrieval import Retriever
from dspy_rag.run_store import run_settings
from dspy_rag.trainsets.formats import Question

TWO_STEPS = {"steps": [{"sub_question": "What was Data Center revenue?", "tool": "search_docs"},
                       {"sub_question": "What was Gaming revenue?", "tool": "search_docs"}]}


def researched(index: Index, planner: dspy.LM | None, main: list[dict[str, Any]]) -> tuple[dspy.Prediction, dict[str, Any]]:
    lm = DummyLM(main, adapter=dspy.JSONAdapter())
    program = DeepResearch(Retriever(index, top_k=4), planner_lm=planner)
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        return run_question(program, Question("q", "How did Data Center and Gaming revenue do?", "$15.01 billion"))


def step(query: str) -> list[dict[str, Any]]:
    return [{"query": query}, {"strategy": "hybrid", "reason": "figures"}]


def test_the_planner_model_writes_the_plan_and_the_model_researches_it(folder: Path) -> None:
    planner = DummyLM([TWO_STEPS], adapter=dspy.JSONAdapter())
    main = [*step("Data Center revenue"), {"decision": "CONTINUE", "reason": "one left"}, *step("Gaming revenue"),
            {"decision": "FINISH", "reason": "both found"}, {"short_answer": "$15.01 billion"}]
    prediction, usage = researched(Index(scratch_config(folder)), planner, main)
    trajectory = prediction.trajectory
    assert [s.sub_question for s in trajectory.steps] == ["What was Data Center revenue?", "What was Gaming revenue?"]
    assert len(planner.history) == 1 and usage["lm_calls"] == len(main) + 1 == trajectory.lm_calls


def test_without_a_planner_model_the_model_plans(folder: Path) -> None:
    main = [TWO_STEPS, *step("Data Center revenue"), {"decision": "FINISH", "reason": "enough"},
            {"short_answer": "$15.01 billion"}]
    prediction, usage = researched(Index(scratch_config(folder)), None, main)
    assert len(prediction.trajectory.steps) == 1 and usage["lm_calls"] == len(main)


def test_a_planner_model_is_built_once_and_only_when_it_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    from dspy_rag import models

    built: list[str] = []
    monkeypatch.setattr(models, "build_lm", lambda config: built.append(config.model) or DummyLM([]))
    config = scratch_config(Path("/nonexistent"))
    assert planner_lm(config.lm) is None
    same = config.lm.model_copy(update={"planner_model": config.lm.model})
    assert planner_lm(same) is None
    other = config.lm.model_copy(update={"planner_model": "local/qwen2.5-coder-1.5b"})
    assert planner_lm(other) is planner_lm(other) and built == ["local/qwen2.5-coder-1.5b"]


@pytest.mark.parametrize(("model", "planner", "shared"), [
    ("openai/gpt-4o-mini", "openai/gpt-4o", True),  # one provider, one key
    ("openai/gpt-4o-mini", "gpt-4o", True),  # LiteLLM's openai, unprefixed
    ("openai/gpt-4o-mini", "anthropic/claude-3-5-haiku-latest", False),
    ("openai/gpt-4o-mini", "local/qwen2.5-coder-1.5b", False),
])
def test_a_planner_model_gets_the_key_and_base_url_only_from_its_own_provider(
        monkeypatch: pytest.MonkeyPatch, model: str, planner: str, shared: bool) -> None:
    from dspy_rag import models

    built: list[Any] = []
    monkeypatch.setattr(models, "build_lm", lambda config: built.append(config) or DummyLM([]))
    lm = scratch_config(Path("/nonexistent"), **{"lm.model": model, "lm.planner_model": planner,
                                                 "lm.api_key": "sk-secret", "lm.api_base": "http://127.0.0.1:9"}).lm
    planner_lm(lm)
    (settings,) = built
    assert settings.model == planner
    assert (settings.api_key is not None, settings.api_base is not None) == (shared, shared)


@pytest.mark.parametrize(("column", "planner", "keyed"), [
    ("openai/gpt-4o", "openai/gpt-4o-mini", True),
    ("anthropic/claude-3-5-sonnet-latest", "anthropic/claude-3-5-haiku-latest", False),  # the key is OpenAI's
])
def test_an_eval_columns_model_and_planner_get_the_key_only_from_lm_models_provider(
        monkeypatch: pytest.MonkeyPatch, column: str, planner: str, keyed: bool) -> None:
    from dspy_rag import models

    built: list[Any] = []
    monkeypatch.setattr(models, "build_lm", lambda config: built.append(config) or DummyLM([]))
    config = scratch_config(Path("/nonexistent"), **{"lm.model": "openai/gpt-4o-mini", "lm.api_key": "sk-secret"})
    (deep,) = columns_of(["deep"], ["none"], [column], planners=[planner])
    settings = column_settings(config, deep)
    planner_lm(settings.lm)
    assert [(s.model, s.api_key is not None) for s in built] == [(planner, keyed)]
    assert (settings.lm.model, settings.lm.api_key is not None) == (column, keyed)


def test_a_local_columns_planner_of_lm_models_provider_keeps_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from dspy_rag import models

    built: list[Any] = []
    monkeypatch.setattr(models, "build_lm", lambda config: built.append(config) or DummyLM([]))
    config = scratch_config(Path("/nonexistent"), **{"lm.model": "openai/gpt-4o-mini", "lm.api_key": "sk-secret"})
    (local,) = columns_of(["deep"], ["none"], ["local/qwen2.5-coder-0.5b"], planners=["openai/gpt-4o"])
    settings = column_settings(config, local)
    assert settings.lm.api_key is None  # the local model is not sent the key
    planner_lm(settings.lm)
    assert [(s.model, s.api_key and s.api_key.get_secret_value()) for s in built] == [("openai/gpt-4o", "sk-secret")]


def test_a_withheld_key_is_named_in_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from dspy_rag import models

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    lm = scratch_config(Path("/nonexistent"), **{"lm.api_key": "sk-secret"}).lm  # the local model's
    with pytest.raises(UserError, match=r"needs OPENAI_API_KEY.*lm.api_key goes only to models of the provider it "
                                        r"was set for \(local\)"):
        models.loaded_beside(lm, "openai/gpt-4o-mini")
    held = scratch_config(Path("/nonexistent"), **{"lm.model": "openai/gpt-4o-mini", "lm.api_key": "sk-secret"}
                          ).lm.for_model("local/qwen2.5-coder-0.5b")  # OpenAI's key, held beside a local model
    with pytest.raises(UserError, match=r"needs ANTHROPIC_API_KEY.*set for \(openai\)"):
        models.loaded_beside(held, "anthropic/claude-3-5-haiku-latest")


def test_an_unknown_planner_model_names_the_setting() -> None:
    lm = scratch_config(Path("/nonexistent"), **{"lm.planner_model": "local/no-such-model"}).lm
    with pytest.raises(UserError, match=r"^lm.planner_model: unknown local model 'local/no-such-model'"):
        planner_lm(lm)


def test_the_model_as_its_own_planner_is_no_planner_model() -> None:
    config = scratch_config(Path("/nonexistent"))
    assert run_settings(with_planner(config, config.lm.model)) == run_settings(config)  # the same runs, reused
    columns = columns_of(["deep"], ["none"], ["local/qwen2.5-coder-0.5b", "local/qwen2.5-coder-1.5b"],
                         planners=[None, "local/qwen2.5-coder-1.5b"])
    assert [c.label for c in columns] == ["deep@qwen2.5-coder-0.5b", "deep@qwen2.5-coder-0.5b+planner-qwen2.5-coder-1.5b",
                                          "deep@qwen2.5-coder-1.5b"]


def test_eval_and_the_planner_share_one_loaded_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from dspy_rag import models

    built: list[str] = []
    monkeypatch.setattr(models, "build_lm", lambda config: built.append(config.model) or DummyLM([]))
    lm = scratch_config(Path("/nonexistent"), **{"lm.planner_model": "local/qwen2.5-coder-1.5b",
                                                 "lm.api_key": "sk-secret", "lm.timeout": 30}).lm
    as_planner = planner_lm(lm)  # without the key: the planner is not the key's provider's
    as_column = models.loaded(lm.model_copy(update={"model": "local/qwen2.5-coder-1.5b"}))  # with it
    assert as_planner is as_column and built == ["local/qwen2.5-coder-1.5b"]  # a local model reads neither
    wider = lm.model_copy(update={"model": "local/qwen2.5-coder-1.5b", "context_window": 8192})
    assert models.loaded(wider) is not as_column and len(built) == 2  # a setting it reads: another load


def with_planner(config: Config, model: str | None) -> Config:
    return config.model_copy(update={"lm": config.lm.model_copy(update={"planner_model": model})})


def test_the_run_store_keys_runs_by_the_planner_model() -> None:
    config = scratch_config(Path("/nonexistent"))
    alone = run_settings(config)
    assert "planner_model" not in alone["lm"]  # runs without one keep their keys
    assert run_settings(with_planner(config, "local/qwen2.5-coder-1.5b")) != alone
    assert run_settings(with_planner(config, "local/qwen2.5-coder-1.5b")) != run_settings(
        with_planner(config, "openai/gpt-4o-mini"))

    def planned_on(base: str) -> dict[str, Any]:
        served = scratch_config(Path("/nonexistent"), **{"lm.model": "openai/qwen", "lm.api_base": base,
                                                          "lm.planner_model": "openai/qwen-7b"})
        local = served.lm.for_model("local/qwen2.5-coder-0.5b")  # its base held for the planner's provider
        return run_settings(served.model_copy(update={"lm": local}))

    assert planned_on("http://127.0.0.1:8001/v1") != planned_on("http://127.0.0.1:8002/v1")  # the planner's server


def test_eval_runs_the_deep_program_once_per_planner_model_and_names_it() -> None:
    columns = columns_of(["baseline", "deep"], ["none"], ["local/qwen2.5-coder-0.5b"],
                         planners=[None, "local/qwen2.5-coder-1.5b"])
    assert [c.label for c in columns] == ["baseline@qwen2.5-coder-0.5b", "deep@qwen2.5-coder-0.5b",
                                          "deep@qwen2.5-coder-0.5b+planner-qwen2.5-coder-1.5b"]


@pytest.mark.slow
def test_ask_plans_with_the_real_local_model_and_researches_with_the_served_one(
        workspace: Path, fake_lm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from dspy_rag import models

    trace = workspace / "trace.json"
    result = invoke("ask", "What was Data Center revenue in fiscal 2023?", "--planner-model",
                    "local/qwen2.5-coder-0.5b", "--trace", str(trace), "--json")
    assert result.returncode == 0, result.stderr
    asked = [payload["messages"][-1]["content"] for _headers, payload in fake_lm.requests]
    assert asked and not any("`steps`" in prompt for prompt in asked)  # the served model never planned
    assert json.loads(result.stdout)["lm_calls"] == len(asked) + 1
    plan = json.loads(trace.read_text())["plans"][0]
    assert plan and all(step["sub_question"] for step in plan)
