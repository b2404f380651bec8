"""Configuration layering, error messages and secret masking (each test runs in its own empty cwd)."""

import json
from pathlib import Path

import pytest

from dspy_rag.config import load_config
from dspy_rag.errors import UserError, redact

# Each layer's values for three fields; a later layer must win over every earlier one.
LAYER_VALUES = {
    "default": ("local/qwen2.5-coder-0.5b", 20, None),
    "yaml": ("openai/from-yaml", 11, "tv-yaml"),
    "env": ("openai/from-env", 12, "tv-env"),
    "flag": ("openai/from-flag", 13, "tv-flag"),
}
YAML = "lm:\n  model: openai/from-yaml\nretrieval:\n  top_k: 11\nweb:\n  tavily_api_key: tv-yaml\n"
ENV = {"DSPY_RAG_LM_MODEL": "openai/from-env", "DSPY_RAG_RETRIEVAL_TOP_K": "12", "TAVILY_API_KEY": "tv-env"}
FLAGS = {"lm.model": "openai/from-flag", "retrieval.top_k": 13, "web.tavily_api_key": "tv-flag"}


@pytest.mark.parametrize(
    "layers",
    [(), ("yaml",), ("env",), ("flag",), ("yaml", "env"), ("yaml", "flag"), ("env", "flag"), ("yaml", "env", "flag")],
    ids=lambda layers: "+".join(layers) or "defaults",
)
def test_precedence(layers: tuple[str, ...]) -> None:
    if "yaml" in layers:
        Path("dspy-rag.yaml").write_text(YAML)  # read from the cwd without being named
    config = load_config(overrides=FLAGS if "flag" in layers else None, environ=ENV if "env" in layers else {})
    model, top_k, tavily = LAYER_VALUES[layers[-1] if layers else "default"]
    assert config.lm.model == model
    assert config.retrieval.top_k == top_k
    secret = config.web.tavily_api_key
    assert (secret.get_secret_value() if secret else None) == tavily


def test_unset_overrides_do_not_mask_lower_layers() -> None:
    config = load_config(overrides={"lm.model": None}, environ={"DSPY_RAG_LM_MODEL": "openai/from-env"})
    assert config.lm.model == "openai/from-env"


def test_explicit_config_path_replaces_default_file() -> None:
    Path("dspy-rag.yaml").write_text("retrieval:\n  top_k: 11\n")
    Path("other.yml").write_text("retrieval:\n  top_n: 7\n")
    config = load_config(Path("other.yml"), environ={})
    assert (config.retrieval.top_k, config.retrieval.top_n) == (20, 7)


def test_config_path_from_environment() -> None:
    Path("env.yml").write_text("retrieval:\n  top_n: 9\n")
    assert load_config(environ={"DSPY_RAG_CONFIG": "env.yml"}).retrieval.top_n == 9


def test_empty_yaml_gives_defaults() -> None:
    Path("dspy-rag.yaml").write_text("# nothing configured yet\n")
    assert load_config(environ={}) == load_config(Path("dspy-rag.yaml"), environ={})
    assert load_config(environ={}).retrieval.top_k == 20


def user_error(yaml_text: str | None = None, environ: dict[str, str] | None = None,
               path: Path | None = None) -> str:
    if yaml_text is not None:
        Path("dspy-rag.yaml").write_text(yaml_text)
    with pytest.raises(UserError) as caught:
        load_config(path, environ=environ or {})
    message = str(caught.value)
    assert message and "\n" not in message
    return message


def test_missing_config_path() -> None:
    assert "missing.yaml" in user_error(path=Path("missing.yaml"))


@pytest.mark.parametrize(
    ("yaml_text", "environ", "mentions"),
    [
        ("lm: [unclosed\n  model: x\n", None, "not valid YAML"),
        ("- lm\n- index\n", None, "mapping"),
        ("just a string\n", None, "mapping"),
        ("lm:\n  modle: openai/gpt-4o-mini\n", None, "lm.modle"),
        ("nosuch:\n  x: 1\n", None, "nosuch"),
        ("retrieval:\n  top_k: many\n", None, "retrieval.top_k"),
        ("retrieval:\n  top_k: 0\n", None, "retrieval.top_k"),
        ("web:\n  provider: google\n", None, "web.provider"),
        ("serve:\n  parallel: 0\n", None, "serve.parallel"),
        (None, {"DSPY_RAG_NOSUCH_THING": "1"}, "DSPY_RAG_NOSUCH_THING"),
        (None, {"DSPY_RAG_RETRIEVAL_TOP_K": "many"}, "retrieval.top_k"),
        (None, {"DSPY_RAG_LM_MODLE": "x"}, "lm.modle"),
    ],
    ids=["bad-yaml", "list", "scalar", "unknown-key", "unknown-section", "wrong-type", "out-of-range",
         "bad-choice", "parallel-below-one", "env-no-section", "env-wrong-type", "env-unknown-key"],
)
def test_bad_configuration_is_one_line_user_error(
    yaml_text: str | None, environ: dict[str, str] | None, mentions: str
) -> None:
    assert mentions in user_error(yaml_text, environ)


SENTINEL_LM = "sk-sentinel-lm-0123456789"
SENTINEL_WEB = "tvly-sentinel-web-9876543210"


def test_secrets_are_masked_but_usable() -> None:
    Path("dspy-rag.yaml").write_text(f"lm:\n  api_key: {SENTINEL_LM}\n")
    config = load_config(environ={"TAVILY_API_KEY": SENTINEL_WEB})
    masked = config.masked()
    dumped = json.dumps(masked)
    for sentinel in (SENTINEL_LM, SENTINEL_WEB):
        assert sentinel not in dumped
        assert sentinel not in repr(config)
    for shown in (masked["lm"]["api_key"], masked["web"]["tavily_api_key"]):
        assert shown and set(shown) == {"*"}
    assert masked["lm"]["model"] == "local/qwen2.5-coder-0.5b", "non-secret values are shown as they are"
    assert config.lm.api_key is not None and config.lm.api_key.get_secret_value() == SENTINEL_LM
    assert config.web.tavily_api_key is not None and config.web.tavily_api_key.get_secret_value() == SENTINEL_WEB


def test_unset_secrets_are_null_when_masked() -> None:
    masked = load_config(environ={}).masked()
    assert masked["lm"]["api_key"] is None and masked["web"]["tavily_api_key"] is None


@pytest.mark.parametrize("variable, field", [("DSPY_RAG_LM_API_BASE", ("lm", "api_base")),
                                             ("DSPY_RAG_INDEX_CHROMA_URL", ("index", "chroma_url")),
                                             ("MLFLOW_TRACKING_URI", ("mlflow", "tracking_uri"))])
def test_a_password_in_a_url_is_masked_and_never_printed(variable: str, field: tuple[str, str]) -> None:
    from dspy_rag.errors import redact

    config = load_config(environ={variable: "https://bob:pass-SENTINEL-77@host.example:8443/v1?x=1"})
    shown = config.masked()[field[0]][field[1]]
    assert shown == "https://***@host.example:8443/v1?x=1"
    assert getattr(getattr(config, field[0]), field[1]).startswith("https://bob:pass-SENTINEL-77@")  # still usable
    assert redact("the server said: pass-SENTINEL-77 rejected") == "the server said: *** rejected"


def test_a_bad_value_from_the_environment_names_its_variable() -> None:
    with pytest.raises(UserError, match=r"'lm.max_tokens' \(set by DSPY_RAG_LM_MAX_TOKENS\)"):
        load_config(environ={"DSPY_RAG_LM_MAX_TOKENS": "abc"})
    with pytest.raises(UserError, match=r"'lm.max_tokens': ") as error:  # a flag overriding it is to blame
        load_config(overrides={"lm.max_tokens": "x"}, environ={"DSPY_RAG_LM_MAX_TOKENS": "abc"})
    assert "set by" not in str(error.value)


def test_a_model_flag_of_another_provider_gets_neither_the_key_nor_the_base() -> None:
    from dspy_rag.cli.options import config_of
    from dspy_rag.models import settings_for

    Path("dspy-rag.yaml").write_text("lm:\n  model: openai/gpt-4o-mini\n  api_key: sk-secret\n"
                                     "  api_base: http://127.0.0.1:9/v1\n")
    same = config_of(None, **{"lm.model": "openai/gpt-4o"}).lm
    assert same.api_key is not None and same.api_key.get_secret_value() == "sk-secret" and same.api_base
    for other in ("anthropic/claude-3-5-haiku-latest", "local/qwen2.5-coder-1.5b"):
        scoped = config_of(None, **{"lm.model": other}).lm
        assert (scoped.model, scoped.api_key, scoped.api_base) == (other, None, None)
    assert config_of(None, **{"lm.model": None}).lm.api_key is not None  # no flag: the configuration as written
    moved = load_config(environ={"DSPY_RAG_LM_MODEL": "anthropic/claude-3-5-haiku-latest"}).lm  # any later layer
    assert (moved.api_key, moved.api_base) == (None, None)
    together = load_config(environ={"DSPY_RAG_LM_MODEL": "anthropic/claude-3-5-haiku-latest",
                                    "DSPY_RAG_LM_API_KEY": "sk-ant"}).lm  # a key set with its model is its own
    assert together.api_key is not None and together.api_key.get_secret_value() == "sk-ant"
    Path("dspy-rag.yaml").write_text("lm:\n  model: openai/gpt-4o-mini\n  api_key: sk-held-for-openai\n"
                                     "  planner_model: openai/gpt-4o\n")
    local = config_of(None, **{"lm.model": "local/qwen2.5-coder-1.5b"}).lm  # held for a model of its provider
    assert local.api_key is None and local.key_providers() == ["openai"]
    assert redact("sent sk-held-for-openai") == "sent ***"  # held, yet never printed
    planner = settings_for(local, "openai/gpt-4o")
    assert planner.api_key is not None and planner.api_key.get_secret_value() == "sk-held-for-openai"
    assert settings_for(local, "anthropic/claude-3-5-haiku-latest").api_key is None
    assert settings_for(settings_for(local, "local/qwen2.5-coder-0.5b"), "openai/gpt-4o").api_key is not None
    Path("dspy-rag.yaml").write_text("lm:\n  api_key: sk-secret\n")  # beside the packaged model: the flag's key
    keyed = config_of(None, **{"lm.model": "anthropic/claude-3-5-haiku-latest"}).lm
    assert keyed.api_key is not None and keyed.api_key.get_secret_value() == "sk-secret"


def test_a_held_key_and_base_go_together_to_a_planner_of_their_provider_only() -> None:
    from dspy_rag.cli.options import config_of
    from dspy_rag.models import settings_for

    Path("dspy-rag.yaml").write_text("lm:\n  model: openai/gpt-4o-mini\n  api_key: sk-secret\n"
                                     "  api_base: http://user:pw-in-base@127.0.0.1:9/v1\n")
    local = config_of(None, **{"lm.model": "local/qwen2.5-coder-1.5b"}).lm
    planner = settings_for(local, "openai/gpt-4o")
    assert (planner.api_base, planner.api_key is not None) == ("http://user:pw-in-base@127.0.0.1:9/v1", True)
    other = settings_for(local, "anthropic/claude-3-5-haiku-latest")
    assert (other.api_base, other.api_key) == (None, None)
    assert redact("at pw-in-base") == "at ***"  # a held base's password is never printed either


def test_a_key_goes_to_no_base_set_later_beside_another_model() -> None:
    from dspy_rag.cli.options import config_of
    from dspy_rag.models import settings_for

    Path("dspy-rag.yaml").write_text("lm:\n  model: openai/gpt-4o-mini\n  api_key: sk-for-openai\n")
    served = {"DSPY_RAG_LM_MODEL": "openai/qwen", "DSPY_RAG_LM_API_BASE": "http://127.0.0.1:9/v1"}
    vllm = load_config(environ=served).lm  # the key was set for OpenAI's server, not this one
    assert (vllm.api_key, vllm.api_base) == (None, "http://127.0.0.1:9/v1")
    planner = settings_for(load_config(overrides={"lm.model": "local/qwen2.5-coder-1.5b"}, environ=served).lm,
                           "openai/gpt-4o")
    assert (planner.api_key, planner.api_base) == (None, "http://127.0.0.1:9/v1")  # never the pair of two models
    proxied = load_config(environ={"DSPY_RAG_LM_API_BASE": "http://127.0.0.1:9/v1"}).lm  # its own model's server
    assert proxied.api_key is not None and proxied.api_base == "http://127.0.0.1:9/v1"
    assert config_of(None, **{"lm.model": "openai/gpt-4o"}).lm.api_key is not None

