"""Configuration: defaults < `dspy-rag.yaml` (or --config) < DSPY_RAG_* environment < CLI flags."""

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

import yaml
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, ValidationError,
                      field_validator)

from dspy_rag import paths
from dspy_rag.errors import UserError, register_secret

DEFAULT_CONFIG_FILE = Path("dspy-rag.yaml")
ENV_PREFIX = "DSPY_RAG_"
# Variables under our prefix that steer the tool itself rather than a configuration field.
# The cores this process may run on (a container can allow fewer than the machine has): the embedder's and
# the reranker's threads.
CORES = len(os.sched_getaffinity(0))
NON_CONFIG_ENV = frozenset({"DSPY_RAG_CONFIG", "DSPY_RAG_DEBUG", "DSPY_RAG_CACHE", "DSPY_RAG_RUNS"})


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def uri_problem(uri: str) -> str | None:
    """Why `uri` does not parse as a URI (a port out of range, an unclosed IPv6 bracket), or None when it does."""
    try:
        urlsplit(uri).port  # noqa: B018 - reading the port checks it
    except ValueError as exc:
        return f"{uri} is no valid URL ({exc}); check it"
    return None


def url_problem(url: str) -> str | None:
    """Why `url` is no http(s) address of a host, or None when it is one; empty is no address at all, which a
    setting reads as unset."""
    if not url:
        return None
    if problem := uri_problem(url):
        return problem
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url} is no http(s) URL of a host; write it like http://127.0.0.1:8000"
    return None


def _fails_if(problem: Callable[[Any], str | None]) -> AfterValidator:
    """A field check from a rule that tells what is wrong with a value: that is the field's error."""

    def check(value: Any) -> Any:
        if (found := problem(value)) is not None:
            # Echoed bytes of a non-UTF-8 environment would break pydantic's own error.
            raise ValueError(found.encode("utf-8", "backslashreplace").decode("utf-8"))
        return value

    return AfterValidator(check)


def _folder_for(purpose: str) -> AfterValidator:
    return _fails_if(lambda path: paths.folder_problem(path, purpose))


NamedPath = Annotated[Path, _fails_if(paths.name_problem)]  # a path a file system can hold
HttpUrl = Annotated[str, _fails_if(url_problem)]
Uri = Annotated[str, _fails_if(uri_problem)]


LOCAL_PREFIX = "local/"  # a model string naming a packaged model, run in-process by llama.cpp


class LMConfig(Section):
    model: str = "local/qwen2.5-coder-0.5b"
    planner_model: str | None = Field(None, description="a model of its own for the deep program's planner, e.g. "
                                      "local/qwen2.5-coder-1.5b; it gets lm.api_base and lm.api_key only where they "
                                      "were set for a model of its provider; empty: the model plans")
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(512, ge=16, le=32768)
    api_base: HttpUrl | None = None
    api_key: SecretStr | None = None
    context_window: int = Field(4096, ge=512, description="local models only: llama.cpp n_ctx")
    timeout: float = Field(120.0, gt=0, description="remote models: seconds to wait for a reply before giving up")
    cache: bool = False
    prompt_cache: bool = Field(True, description="local models: keep each signature's prompt state on disk")
    threads: int | None = Field(None, ge=1, description="local models: CPU threads (default all cores; 1 leaves a "
                                "core to other work, which llama.cpp's spinning threads otherwise fight)")
    parallel_steps: int = Field(4, ge=1, le=16, description="served models (lm.api_base or a provider's): plan steps "
                                "that build on no earlier answer researched at once, at most this many; the "
                                "embedded local model researches one at a time")

    # lm.api_key and lm.api_base set for another provider's model than `model`, by (name, provider): a planner,
    # teacher or judge of that provider gets them (`for_model`), `model` never does.
    _held: dict[tuple[Literal["api_key", "api_base"], str], SecretStr | HttpUrl] = PrivateAttr(default_factory=dict)

    def for_model(self, model: str) -> "LMConfig":
        """These settings for `model` in place of `self.model`: `api_key` and `api_base` each go only to a model of
        the provider they were set for (`self.model`'s, or a held one's), and the rest are held, so that a key is
        never sent to another provider and a planner of the key's provider still gets it."""
        update: dict[str, Any] = {"model": model}
        held: dict[tuple[Literal["api_key", "api_base"], str], SecretStr | HttpUrl] = {}
        if self.api_key is None and not self.api_base and not self._held:
            return self.model_copy(update=update)
        target = provider(model)
        names: tuple[Literal["api_key", "api_base"], ...] = ("api_key", "api_base")
        for name in names:
            kept = {**({(name, provider(self.model)): value} if (value := getattr(self, name)) else {}),
                    **{key: value for key, value in self._held.items() if key[0] == name}}
            update[name] = kept.pop((name, target), None)
            held.update(kept)
        scoped = self.model_copy(update=update)
        scoped._held = held
        return scoped

    def key_providers(self) -> list[str]:
        """The providers an lm.api_key is set for: `model`'s, or held for another's."""
        return ([provider(self.model)] if self.api_key is not None else []) + [
            held for name, held in self._held if name == "api_key"]

    def held_secrets(self) -> list[str]:
        """The held keys, and the passwords in held bases: never to be printed."""
        return [secret for value in self._held.values()
                if (secret := value.get_secret_value() if isinstance(value, SecretStr) else url_password(str(value)))]

    @property
    def embedded(self) -> bool:
        """The model runs in this process (llama.cpp), one call at a time; otherwise a server answers it."""
        return self.model.startswith(LOCAL_PREFIX)

    @property
    def separate_planner(self) -> str | None:
        """`planner_model` when it names another model than `model`; None when the model plans."""
        return self.planner_model if self.planner_model and self.planner_model != self.model else None


class EmbeddingConfig(Section):
    model: str = "local/all-minilm-l6-v2"
    batch_size: int = Field(32, ge=1)


# Chroma's rule for a collection's name; a server's gets a 9-character suffix and a catalog collection 8 more
# (dspy_rag.shared_index), so 495 at most, not 512.
COLLECTION_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]{1,493}[a-zA-Z0-9]")
IP_ADDRESS = re.compile(r"\d+\.\d+\.\d+\.\d+")


def collection_problem(name: str) -> str | None:
    """Why Chroma would refuse `name` for a collection, or None when it takes it."""
    if COLLECTION_NAME.fullmatch(name) and ".." not in name and not IP_ADDRESS.fullmatch(name):
        return None
    return (f"'{name:.40}' is no collection name Chroma takes; use 3 to 495 letters, digits, '.', '_' or '-', a "
            "letter or digit first and last, no '..' and no IP address, e.g. documents")


class IndexConfig(Section):
    path: Annotated[Path, _folder_for("the index")] = Path(".dspy-rag/index")
    chroma_url: HttpUrl | None = Field(None, description="Chroma server, e.g. http://127.0.0.1:8000; empty = embedded")
    collection: Annotated[str, _fails_if(collection_problem)] = "documents"

    @field_validator("path", mode="before")
    @classmethod
    def _named(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError("is empty; name a folder for the index, e.g. .dspy-rag/index")
        return value


class RetrievalConfig(Section):
    top_k: int = Field(20, ge=1, le=200)
    top_n: int = Field(4, ge=1, le=50)
    rrf_k: int = Field(60, ge=1)
    reranker: str = Field("auto", description="auto (one you trained in artifacts/, else the shipped one), none, "
                          "a name or a path")


class IngestConfig(Section):
    chunk_chars: int = Field(1000, ge=200, le=8000)
    chunk_overlap: int = Field(150, ge=0, le=2000)
    user_agent: str = Field(
        "dspy-rag research assistant admin@example.com",
        description="sent when downloading; SEC EDGAR asks for 'Name email' of whoever runs the tool",
    )


class BudgetConfig(Section):
    max_steps: int = Field(4, ge=1)
    max_lm_calls: int = Field(24, ge=1)
    wall_clock_seconds: float = Field(300.0, gt=0)


class GuardConfig(Section):
    """Which guards stand over the deep program's LM modules (pipelines/guards.py); each is on by default."""

    web_routing: bool = Field(True, description="send a step to the web when the question asks for newer facts")
    repeated_step: bool = Field(True, description="skip a step already researched or already in the plan, word "
                                "for word")
    query_guard: bool = Field(True, description="search the sub-question when the rewritten query copies a "
                              "finding or shares no word with it")
    keep_going: bool = Field(True, description="go on, without a policy call, when a remaining step builds on "
                             "an earlier answer or is the first web search")
    route_check: bool = Field(True, description="research a question the router declines when the reranker judges "
                              "one of its passages relevant")
    injection: bool = Field(True, description="remove passage text that forges the prompt's structure or gives the "
                            "assistant orders before an LM reads it (both programs)")
    conflicts: bool = Field(True, description="state each value, cited, when the evidence gives different values for "
                            "the same quantity, and prefer the higher-tier source's (both programs)")


class RoleConfig(Section):
    """Which optional roles of the deep program call the LM; one switched off is stood in for by its code fallback."""

    distiller: bool = Field(False, description="notes on each step's passages by the LM; off: their first sentences")
    reflection: bool = Field(False, description="each step's finding by the LM; off: the notes' first sentence")
    router: bool = Field(False, description="route the question first: research it, answer it from general "
                         "knowledge, ask for what it leaves out, or say what the documents cover; off: research all")
    repair: bool = Field(False, description="one LM pass rewriting or dropping the answer's unsupported sentences "
                         "from the same evidence, kept only when the citation check then flags fewer; off: flagged")


class TierRule(Section):
    """Sources matching every criterion given get `tier` (1 is trusted most)."""

    tier: int = Field(ge=1, le=9)
    path: str | None = Field(None, description="a glob on the source's path or URL, e.g. '*/filings/*'")
    domain: str | None = Field(None, description="a glob on a web source's domain, e.g. '*.gov' or 'sec.gov'")
    kind: str | None = Field(None, description="document (ingested), web, or an ingested type: html, markdown, "
                             "text, pdf")


NEWS_DOMAINS = ("reuters.com", "bloomberg.com", "cnbc.com", "wsj.com", "ft.com", "apnews.com", "nytimes.com",
                "marketwatch.com", "fool.com", "techcrunch.com", "theverge.com", "engadget.com", "zdnet.com",
                "arstechnica.com", "forbes.com", "businessinsider.com", "yahoo.com", "news.*")
DEFAULT_TIER_RULES = [TierRule(tier=1, kind="document"), TierRule(tier=2, domain="*.gov"),
                      TierRule(tier=2, domain="investor.*"), TierRule(tier=2, domain="investors.*"),
                      TierRule(tier=2, domain="ir.*"), *(TierRule(tier=3, domain=d) for d in NEWS_DOMAINS)]


class TierConfig(Section):
    """Source tiers (dspy_rag/tiers.py): the first rule a source matches gives its tier; add your company's own
    domain as tier 2, e.g. `rules: [{tier: 2, domain: nvidia.com}, ...]` (a list replaces the defaults)."""

    rules: list[TierRule] = Field(default_factory=lambda: list(DEFAULT_TIER_RULES))
    default: int = Field(4, ge=1, le=9, description="the tier of a source no rule matches")


class WebConfig(Section):
    provider: Literal["off", "tavily", "snapshot"] = "off"
    snapshot_path: NamedPath | None = None
    tavily_api_key: SecretStr | None = None
    tavily_base_url: HttpUrl | None = Field(None, description="a Tavily-compatible gateway; default api.tavily.com")


class ArtifactConfig(Section):
    path: Annotated[Path, _folder_for("the artifacts")] = Path("artifacts")
    default: str = Field("auto", description="deep program's prompts: auto (the artifact shipped for the model, "
                         "if any), none (uncompiled), or an artifact name or folder")


class MLflowConfig(Section):
    tracking_uri: Uri | None = Field(None, description="compile and eval also log to this MLflow server or "
                                     "database (e.g. sqlite:///mlflow.db); MLFLOW_TRACKING_URI sets it too")
    experiment: str = "dspy-rag"


HOST = re.compile(r"[A-Za-z0-9:][A-Za-z0-9.:-]*")  # a name or an IPv4/IPv6 address, as a socket takes it


def host_problem(host: str) -> str | None:
    """Why `host` is no address a server can listen on, or None when it may be one."""
    if HOST.fullmatch(host) and len(host) <= 253:
        return None
    return f"'{host[:40]}' is no host name or IP address; use e.g. 127.0.0.1, or 0.0.0.0 for every interface"


class ServeConfig(Section):
    """`dspy-rag serve` (and `mcp --http`): where it listens, who may call it and how much it takes on."""

    host: Annotated[str, _fails_if(host_problem)] = Field("127.0.0.1", description="the address to listen on; "
                                                          "0.0.0.0 opens it to the network")
    port: int = Field(8765, ge=1, le=65535)
    mcp_port: int = Field(8766, ge=1, le=65535, description="`dspy-rag mcp --http`'s port")
    token: SecretStr | None = Field(None, description="a bearer token every request must carry; set it through "
                                    "DSPY_RAG_SERVE_TOKEN rather than in the file")
    queue: int = Field(8, ge=0, le=1000, description="requests that may wait for the model; one more gets 503")
    parallel: int = Field(4, ge=1, le=64, description="runs at once when a server answers the model (lm.api_base or "
                          "a provider); the embedded model runs one at a time")
    max_body_bytes: int = Field(65536, ge=1024, le=16 * 2**20, description="the largest request body taken")
    ingest: bool = Field(False, description="allow POST /v1/ingest, which reads files and URLs into the index")
    trajectories: int = Field(100, ge=1, le=10000, description="finished runs kept for /v1/trajectories/{id}")


class RunsConfig(Section):
    """The run store (`dspy-rag runs`): the program runs eval, compile and distill-policy reuse."""

    max_mb: int = Field(512, ge=1, description="the store's size cap in MB; past it the least recently used runs "
                        "are dropped")


class Config(Section):
    lm: LMConfig = LMConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    index: IndexConfig = IndexConfig()
    ingest: IngestConfig = IngestConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    budgets: BudgetConfig = BudgetConfig()
    guards: GuardConfig = GuardConfig()
    roles: RoleConfig = RoleConfig()
    tiers: TierConfig = TierConfig()
    web: WebConfig = WebConfig()
    artifacts: ArtifactConfig = ArtifactConfig()
    mlflow: MLflowConfig = MLflowConfig()
    serve: ServeConfig = ServeConfig()
    runs: RunsConfig = RunsConfig()

    def masked(self) -> dict[str, Any]:
        """The configuration as plain data, secrets shown as '***' (or null when unset), also a password in a URL."""
        data = self.model_dump(mode="json")
        for section, name in URL_FIELDS:
            if data[section][name]:
                data[section][name] = without_password(data[section][name])
        return data


URL_FIELDS = (("lm", "api_base"), ("index", "chroma_url"), ("web", "tavily_base_url"), ("mlflow", "tracking_uri"))


def without_password(url: str) -> str:
    """The URL with the credentials of its user part ("https://user:key@host") shown as '***'."""
    parts = urlsplit(url)
    if parts.password is None and parts.username is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"***@{host}"))


def url_password(url: str | None) -> str | None:
    return urlsplit(url).password if url else None


# Well-known variables of other tools (secrets among them) that set ours.
ENV_ALIASES = {"TAVILY_API_KEY": "web.tavily_api_key", "MLFLOW_TRACKING_URI": "mlflow.tracking_uri"}


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    section, _, field = dotted.partition(".")
    tree.setdefault(section, {})
    if not isinstance(tree[section], dict):
        raise UserError(f"configuration section '{section}' must be a mapping, not {type(tree[section]).__name__}; "
                        f"write it as `{section}:` over indented `field: value` lines")
    tree[section][field] = value


def _env_overrides(environ: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Map DSPY_RAG_<SECTION>_<FIELD> (e.g. DSPY_RAG_LM_MAX_TOKENS) to 'section.field': its value and the
    variable that set it."""
    found: dict[str, tuple[str, str]] = {}
    for name, value in environ.items():
        if name in ENV_ALIASES:
            found[ENV_ALIASES[name]] = value, name
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name in NON_CONFIG_ENV:
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        section = next((s for s in Config.model_fields if rest.startswith(s + "_")), None)
        if section is None:
            raise UserError(f"environment variable {name} names no configuration section; unset it or see `dspy-rag config`")
        found[f"{section}.{rest[len(section) + 1 :]}"] = value, name
    return found


def provider(model: str) -> str:
    """Who serves a model string: `local` for a packaged model, else LiteLLM's provider (`gpt-4o` and
    `openai/gpt-4o-mini`: openai); the string itself when LiteLLM cannot route it."""
    if model.startswith(LOCAL_PREFIX):
        return "local"
    import litellm

    litellm.suppress_debug_info = True  # its "Provider List" banner would land in a --json document
    try:
        return litellm.get_llm_provider(model)[1]
    except Exception:  # litellm raises its own BadRequestError subclasses for a string it cannot route
        return model


def _keyed_to_its_model(lm: LMConfig, layers: list[dict[str, Any]]) -> LMConfig:
    """`lm` with a key or base set for another provider's model held back from its model. A key or base belongs to
    the model in effect in the layer (defaults, file, environment, flags) that set it; where a later layer set
    `lm.model`, it goes to the new model only when both have one provider, or its model was the packaged one (which
    takes neither); otherwise it is held for a planner of its provider. A key whose base a later layer re-set beside
    another model goes to neither: that base is another server than the one it was set for."""
    def layer_of(dotted: str) -> int:  # 0: the default
        return max((n + 1 for n, layer in enumerate(layers) if layer.get(dotted) is not None), default=0)

    def owner_at(at: int) -> str:
        beneath = [layer["lm.model"] for layer in layers[:at] if layer.get("lm.model") is not None]
        return str(beneath[-1]) if beneath else LMConfig.model_fields["model"].default

    keyed = lm
    key_at, base_at = layer_of("lm.api_key"), layer_of("lm.api_base")
    for name, at in (("api_key", key_at), ("api_base", base_at)):
        owner = owner_at(at)
        if not getattr(lm, name) or layer_of("lm.model") <= at or owner.startswith(LOCAL_PREFIX):
            continue
        if name == "api_key" and base_at > key_at and owner_at(base_at) != owner:
            keyed = keyed.model_copy(update={name: None})
        elif provider(owner) != provider(lm.model):
            keyed = keyed.model_copy(update={name: None})
            keyed._held = {**keyed._held, (name, provider(owner)): getattr(lm, name)}
    return keyed


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read configuration file {path}: {exc.strerror}; check its permissions") from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"configuration file {path} is not UTF-8 text; save it as UTF-8") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"configuration file {path} is not valid YAML{where} ({problem}); fix it there") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"configuration file {path} must hold a mapping of sections; start it with `lm:`, `index:` "
                        "or another section of `dspy-rag config`")
    return data


def load_config(
    path: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Build the effective configuration; `overrides` are CLI flags as {'section.field': value}."""
    environ = os.environ if environ is None else environ
    if path is None and environ.get(f"{ENV_PREFIX}CONFIG"):
        path = paths.named(Path(environ[f"{ENV_PREFIX}CONFIG"]), f"{ENV_PREFIX}CONFIG")
    if path is not None and not paths.named(path, "configuration file").is_file():
        raise UserError(f"configuration file {path} does not exist; create it or drop --config")
    if path is None and DEFAULT_CONFIG_FILE.is_file():
        path = DEFAULT_CONFIG_FILE
    tree = _read_yaml(path) if path else {}
    written = tree.get("lm") if isinstance(tree.get("lm"), dict) else {}
    from_environment = _env_overrides(environ)
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    layers = [{f"lm.{k}": v for k, v in written.items()}, {k: value for k, (value, _) in from_environment.items()},
              flags]
    for dotted, value in {**layers[1], **flags}.items():
        _set_dotted(tree, dotted, value)
    try:
        config = Config.model_validate(tree)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        reason = first["msg"].removeprefix("Value error, ")  # a validator's own sentence needs no label
        variable = from_environment.get(".".join(str(part) for part in first["loc"][:2]))
        origin = f" (set by {variable[1]})" if variable and where not in flags else ""
        raise UserError(f"invalid configuration at '{where}'{origin}: {reason} (see `dspy-rag config`)") from exc
    config = config.model_copy(update={"lm": _keyed_to_its_model(config.lm, layers)})
    for secret in (config.lm.api_key, config.web.tavily_api_key, config.serve.token):
        if secret is not None:
            register_secret(secret.get_secret_value())
    for held in config.lm.held_secrets():
        register_secret(held)
    for section, name in URL_FIELDS:
        if password := url_password(getattr(getattr(config, section), name)):
            register_secret(password)
    return config
