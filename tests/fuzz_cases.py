"""What the fuzzing campaign (fuzz_cli.py) feeds the command line: for every command the app lists, argument
vectors of its own options with hostile values (by the option's name where it has a domain, else by its type),
repeated and unknown options; hostile configuration files; hostile DSPY_RAG_* environments.

Paths name the fixtures of a case's working folder (`FIXTURES`, `ODDITIES`), the campaign's shared index, or a
few system places where nothing can be created. Nothing else drawn names a place outside the case's scratch
folder, since the campaign runs as whoever runs the tests, root in CI containers: generated text and bytes never
start with '/' and hold no '..' (`confined`), and the few chosen values with '..' climb from the working folder
no higher than the case's own."""

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import typer.main
import yaml
from hypothesis import strategies as st

from dspy_rag.cli import app
from dspy_rag.config import ENV_ALIASES, ENV_PREFIX, Config
from dspy_rag.evals.evaluate import ABLATIONS
from dspy_rag.optimizers.teleprompters import OPTIMIZERS

DOC = b"# Sales\nWidgets are sold in Norway.\n\n# Risks\nCompetitors copy gadgets.\n"
QUESTION_ROWS = b'{"id": "q1", "question": "Where are widgets sold?", "answer": "Norway", "split": "train"}\n' \
                b'{"id": "q2", "question": "Who copies gadgets?", "answer": "Competitors", "split": "dev"}\n'
# The files of every case's working folder, by the name its arguments use.
FIXTURES: dict[str, bytes] = {
    "doc.md": DOC,
    "page.html": b"<html><body><h1>Sales</h1><p>Widgets are sold in Norway.</p></body></html>",
    "notes.txt": b"Widgets are sold in Norway.\n",
    "empty.md": b"",
    "blank.md": b" \n\t\n",
    "binary.md": bytes(range(256)) * 4,
    "fake.pdf": b"not a PDF at all",
    "sheet.xlsx": b"PK\x03\x04",
    "folder/a.md": DOC,
    "folder/b.xlsx": b"PK\x03\x04",
    "folder/.hidden.md": DOC,
    "qs.jsonl": QUESTION_ROWS,
    "corpus.jsonl": b'{"id": "p1", "title": "Sales", "text": "Widgets are sold in Norway."}\n',
    "not-json.jsonl": b"{not json\n",
    "tiny.yaml": b"name: tiny\ndescription: two facts\nquestions: qs.jsonl\ndocuments: [doc.md]\nsplit: {field: split}\n",
    "no-questions.yaml": b"name: none\ndescription: no such file\nquestions: absent.jsonl\ndocuments: [doc.md]\n",
    "broken.yaml": b"name: [\n",
    "snap.jsonl": b'{"url": "https://example.com/a", "title": "A", "content": "Widgets are sold in Norway."}\n',
    "bad-snap.jsonl": b'{"title": "no url"}\n',
    "binary.jsonl": bytes(range(256)),
    "index-catalog/catalog.json": b'{"format": 1, "chunks": []}',
    "artifacts/broken-artifact/manifest.json": b"{",
}
# Places that are no plain file: a FIFO (reading it would block), a symlink loop, a dangling symlink, a file whose
# name is not UTF-8 (as a user's argv arrives, surrogate-escaped), an empty folder.
ODDITIES: dict[str, Callable[[Path], object]] = {
    "fifo.md": os.mkfifo, "loop": lambda path: path.symlink_to(path.name),
    "dangling.md": lambda path: path.symlink_to("absent.md"), "\udcff.md": lambda path: path.write_bytes(DOC),
    "empty-folder": Path.mkdir,
}
# Absolute places that exist and where nothing can be created, as root too; /tmp and / are never named.
SYSTEM_PATHS = ("/dev/null", "/proc/self/status", "/proc", "/sys/kernel")
PATHS = (*FIXTURES, *ODDITIES, *SYSTEM_PATHS, "folder", "folder/", "index-catalog", ".", "missing.md", "missing/deep/x.md",
         "doc.md/under", "日本語.md", "[bold]x[/bold].md", "a" * 300, "x/" * 600, "conf.yaml", "out", "trace.json",
         "plot.png", "../outside", "~", "-")
TEXT = ("", " ", "\t", "-", "--", "-x", "=", "0", "x" * 20_000, "é", "日本語", "🙂", "\u200b", "\u202e",
        "\x1b[31mred\x1b[0m", "\x1b]0;title\x07", "\r", "a\nb", "\x7f", "\x85", "[/bold]", "[red]x[/red]",
        "[link=file:///etc/passwd]x[/link]", "%s", "{0}", "{}", "$(id)", "'\"", "\\", "\udcff", "..", ".",
        "con", "a" * 300, "None", "null", "true")
NUMBERS = ("0", "-1", "1", "2", "-0", "1.5", "0.5", "nan", "NaN", "inf", "-inf", "1e309", "1e-400", "9" * 30,
           "0x10", "1_000", " 3 ", "٣", "3.0", "", "abc", "1,2")
MODELS = ("local/qwen2.5-coder-0.5b", "local/qwen2.5-coder-1.5b", "local/nope", "local/", "openai/gpt-4o-mini",
          "openai/", "openai/served", "nope", "ollama_chat/x", "/")
URLS = ("http://127.0.0.1:{dead}", "http://127.0.0.1:{dead}/v1", "http://localhost:{dead}", "http://", "https://",
        "http://[::1", "not a url", "ftp://example.com", "http://example.com", "https://user:pw@example.com/v1",
        "http://127.0.0.1:99999", "http://127.0.0.1:-1", "sqlite:///mlflow.db", "file:///etc/passwd")
# Values with a meaning for an option of that name (in any command), beside the hostile ones.
DOMAINS: dict[str, tuple[str, ...]] = {
    "model": MODELS, "teacher": MODELS, "judge": MODELS, "prepare": MODELS,
    "trainset": ("nvidia-10k", "hotpotqa", "reference", "tiny.yaml", "no-questions.yaml", "broken.yaml",
                 "missing.yaml", "doc.md", "folder"),
    "optimizer": tuple(OPTIMIZERS),
    "set": ("demos=3", "demos=-1", "demos=nan", "demos=1e309", "demos=1.5", "nope=1", "=", "demos", "demos=",
            "=3", "k=2", "k=99999999999999999999", "max_errors=-0"),
    "weight": ("f1=0.6", "f1=-1", "f1=nan", "f1=inf", "nope=1", "f1", "f1=x", "em=0", "f1=0", "=1", "f1=1e309"),
    "pipeline": ("deep", "baseline", "plain", "nope"),
    "policy": ("llm", "plan", "learned", "nope"),
    "without": (*ABLATIONS, "nope"), "with": (*ABLATIONS, "nope"),
    "artifact": ("auto", "none", "deep-qwen2.5-coder-0.5b", "nvidia-10k-plans", "nope", "broken-artifact",
                 "../outside", ".hidden", "a/b"),
    "parent": ("deep-qwen2.5-coder-0.5b", "nope", "broken-artifact", "../outside"),
    "name": ("minilm", "ok-name", "../x", ".x", "a/b", "a" * 300, "a" * 128),
    "web": ("off", "tavily", "snapshot", "snap.jsonl", "bad-snap.jsonl", "binary.jsonl", "folder", "empty-folder",
            "missing.jsonl"),
    "scaling": ("10000", "1000,2000", "0", "-5", "x", ",", "1e3", "10_000", "9" * 30, "100,,200"),
    "questions": ("nvidia-10k", "hotpotqa", "tiny.yaml", "qs.jsonl", "not-json.jsonl", "corpus.jsonl"),
    "corpus": ("corpus.jsonl", "qs.jsonl", "not-json.jsonl"),
    "config": ("conf.yaml", "dspy-rag.yaml", "broken.yaml"),
}
# A field of the configuration whose name ends so takes values of that domain.
FIELD_DOMAINS: dict[str, tuple[str, ...]] = {
    "model": MODELS, "api_base": URLS, "chroma_url": URLS, "tavily_base_url": URLS, "tracking_uri": URLS,
    "path": PATHS, "snapshot_path": PATHS, "reranker": ("auto", "none", "minilm", "folder", "doc.md", "", "a/b"),
    "provider": ("off", "tavily", "snapshot", "Tavily"), "collection": ("documents", "ab", "a b", "a..b", "1.2.3.4",
                                                                         "-abc", "x" * 64, "docs_1"),
    "default": DOMAINS["artifact"], "api_key": ("sk-test-000000000000",), "tavily_api_key": ("tvly-000000000000",),
}
UNKNOWN_OPTIONS = ("--nope", "-x", "--", "--model=", "-", "--json=1", "--config")
# Names under our prefix that name no field, and the variables that steer the tool rather than a field.
BOGUS_VARIABLES = ("DSPY_RAG_NOPE", "DSPY_RAG_LM", "DSPY_RAG_LM_", "DSPY_RAG_LM_NOPE", "DSPY_RAG_lm_model",
                   "DSPY_RAG_", "DSPY_RAG_INDEXPATH")
RAW_CONFIGS = (b"", b"null", b"[]", b"42", b"lm: [", b"\tlm: {}", b"lm:\n  model: [\n", b"\xff\xfe\x00l",
               b"lm: &a [*a]", b"--- {}\n--- {}\n", b"!!python/object/apply:os.system [id]", b"lm: !!binary AAAA",
               b"a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: &c [*b, *b, *b]\nlm: {model: [*c, *c, *c]}\n",
               '\ufefflm: {model: "\\x1b[31m"}\n'.encode(), b"lm: {model: ~}", b"lm: 3", b"lm: {}\nlm: {}\n",
               b"index: {path: ''}", b"index: {path: doc.md}", b"lm: {max_tokens: .nan}", b"? [a]\n: b\n",
               b"lm: {temperature: !!float 1e999}", "lm: {model: \"\udcff\"}".encode("utf-8", "surrogateescape"))


def lay_out(folder: Path, named: str) -> None:
    """A case's working folder: the fixtures and odd places whose names occur in `named` (its arguments, variables
    and files, joined); writing every one for every case would cost more than most cases."""
    named += "".join(data.decode("utf-8", "replace") for name, data in FIXTURES.items() if name in named)  # tiny.yaml's
    for name, data in FIXTURES.items():
        if any(part in named for part in name.split("/")):
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
    for name, make in ODDITIES.items():
        if name in named:
            make(folder / name)


@dataclass(frozen=True)
class Parameter:
    """An option or argument of a command, as the fuzzer needs to know it."""

    names: tuple[str, ...]  # '--model'; '--dry-run' and '--no-dry-run'; an argument's own name
    kind: str  # flag, int, float, path, choice or text
    choices: tuple[str, ...]
    positional: bool
    repeated: bool  # an argument taking several values
    required: bool

    @property
    def domain(self) -> tuple[str, ...]:
        return DOMAINS.get(self.names[0].lstrip("-").replace("-", "_").split("_")[-1], ())


@dataclass(frozen=True)
class Case:
    """One run of the command line: the arguments after `dspy-rag`, the environment beside the runner's, and
    the configuration files written into the working folder by name."""

    command: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    files: tuple[tuple[str, bytes], ...]
    ingested: bool  # the folder's default index is the campaign's shared one, as after a first `ingest`


def _kind(annotation: Any) -> tuple[str, tuple[str, ...]]:
    if get_origin(annotation) is list:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) is Literal:
        return "choice", tuple(str(a) for a in get_args(annotation))
    names = {bool: "flag", int: "int", float: "float", Path: "path"}
    return names.get(annotation, "text"), ()


def _parameter(param: Any) -> Parameter:
    # Typer keeps the annotation it built the parameter from; a parameter without one is fuzzed as text.
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", str)
    kind, choices = ("flag", ()) if getattr(param, "is_flag", False) else _kind(annotation)
    positional = param.param_type_name == "argument"
    return Parameter(tuple(param.opts) + tuple(getattr(param, "secondary_opts", ())) if not positional
                     else (param.name,), kind, choices, positional, positional and param.nargs == -1,
                     bool(param.required))


# Options that change the user's shell rather than run a command: never fuzzed.
UNFUZZED = frozenset({"--install-completion", "--show-completion", "--help"})


def commands() -> dict[str, tuple[Parameter, ...]]:
    """Every command `dspy-rag --help` lists, a group's as 'bench retrieval', and '' for the top level itself."""
    found: dict[str, tuple[Parameter, ...]] = {}

    def walk(command: Any, path: tuple[str, ...]) -> None:
        params = tuple(_parameter(p) for p in command.params if not set(p.opts) & UNFUZZED)
        if hasattr(command, "commands") and command.commands:
            if not path:
                found[""] = params
            for name, sub in command.commands.items():
                walk(sub, (*path, name))
        else:
            found[" ".join(path)] = params

    walk(typer.main.get_command(app), ())
    return found


def confined(text: str) -> str:
    """Free text that, read as a path, stays inside the case's folder."""
    return text.lstrip("/").replace("..", "__")


def _free_text() -> st.SearchStrategy[str]:
    # No NUL: an argv or environment string cannot hold one.
    return st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=24).map(confined)


FIELD_VARIABLES = tuple(f"{ENV_PREFIX}{section}_{name}".upper() for section, info in Config.model_fields.items()
                        for name in info.annotation.model_fields)
VARIABLES = (*FIELD_VARIABLES, *BOGUS_VARIABLES, *ENV_ALIASES, f"{ENV_PREFIX}CONFIG", f"{ENV_PREFIX}CACHE")
SECTION_FIELDS = {section: tuple(info.annotation.model_fields) for section, info in Config.model_fields.items()}


class Values:
    """The hostile values of a campaign, with its shared index and the port where nothing listens filled in.
    Strategies are built once: hypothesis checks a strategy on its first draw, which costs more than the draw."""

    def __init__(self, shared_index: str, dead_port: int) -> None:
        self.dead_port = dead_port
        self.paths = st.sampled_from((*PATHS, shared_index))
        self.text = st.one_of(st.sampled_from(TEXT), _free_text())
        self.numbers = st.one_of(st.sampled_from(NUMBERS), st.integers().map(str),
                                 st.floats(allow_nan=True, allow_infinity=True).map(repr))
        # YAML can carry a NUL ("\0"), which no argument or variable can.
        scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), self.text, st.sampled_from(NUMBERS),
                            st.just("a\x00b"))
        self.yaml_values = st.one_of(scalars, st.lists(scalars, max_size=2), st.dictionaries(self.text, scalars,
                                                                                            max_size=1))
        fields = {name for names in SECTION_FIELDS.values() for name in names} | {"nope"}
        self.fields = {name: self._for_field(name) for name in fields}
        self.variables = {name: self._for_variable(name) for name in VARIABLES}
        self._parameters: dict[Parameter, st.SearchStrategy[str]] = {}

    def domain(self, values: tuple[str, ...]) -> st.SearchStrategy[str]:
        return st.sampled_from(tuple(v.replace("{dead}", str(self.dead_port)) for v in values))

    def for_parameter(self, parameter: Parameter) -> st.SearchStrategy[str]:
        """Mostly a value that means something to the option (its domain, else one of its type), else hostile."""
        if parameter not in self._parameters:
            by_kind = {"int": self.numbers, "float": self.numbers, "path": self.paths, "text": self.paths,
                       "choice": st.sampled_from(parameter.choices or ("",))}
            usual = self.domain(parameter.domain) if parameter.domain else by_kind[parameter.kind]
            self._parameters[parameter] = st.one_of(usual, usual, usual, usual, self.text, self.numbers)
        return self._parameters[parameter]

    def _for_field(self, name: str) -> st.SearchStrategy[Any]:
        """A YAML value for a field of that name: its domain, or any scalar, list or mapping."""
        domain = FIELD_DOMAINS.get(name) or FIELD_DOMAINS.get(name.rsplit("_", 1)[-1], ())
        return st.one_of(self.domain(domain), self.domain(domain), self.yaml_values) if domain else self.yaml_values

    def _for_variable(self, name: str) -> st.SearchStrategy[str]:
        field = name.removeprefix(ENV_PREFIX).lower()
        domain = next((d for key, d in FIELD_DOMAINS.items() if field.endswith(key)), ())
        if name == f"{ENV_PREFIX}CONFIG":
            domain = DOMAINS["config"] + PATHS
        # What a shell hands over: any bytes but NUL, surrogate-escaped where they are no UTF-8.
        raw = st.binary(max_size=12).filter(lambda b: b"\x00" not in b).map(
            lambda b: confined(b.decode("utf-8", "surrogateescape")))
        hostile = st.one_of(self.text, self.numbers, raw)
        return st.one_of(self.domain(domain), self.domain(domain), hostile) if domain else hostile


def one_in(n: int) -> st.SearchStrategy[bool]:
    """True once in `n` draws; hypothesis leans to the first choice, so the rare one comes last."""
    return st.sampled_from((False,) * (n - 1) + (True,))


@st.composite
def argv_for(draw: st.DrawFn, name: str, params: tuple[Parameter, ...], values: Values) -> tuple[str, ...]:
    """The command's words, then its arguments and options in any order: a few options (repeats included), the
    required ones mostly there so a case gets past the parser, now and then an unknown option."""
    options = [p for p in params if not p.positional]
    chosen = draw(st.lists(st.sampled_from(options), max_size=5)) if options else []
    chosen += [p for p in options if p.required and p not in chosen and not draw(one_in(10))]
    items: list[tuple[str, ...]] = []
    for parameter in chosen:
        flag = draw(st.sampled_from(parameter.names))
        if parameter.kind == "flag":
            items.append((flag,))
        elif draw(one_in(10)):
            items.append((f"{flag}={draw(values.for_parameter(parameter))}",))
        else:
            items.append((flag, draw(values.for_parameter(parameter))))
    for parameter in (p for p in params if p.positional):
        count = draw(st.integers(1, 3)) if parameter.repeated else 1
        count = 0 if draw(one_in(10)) else count
        items += [(draw(values.for_parameter(parameter)),) for _ in range(count)]
    if draw(one_in(10)):
        items.append((draw(st.sampled_from(UNKNOWN_OPTIONS)),))
    return (*name.split(), *(word for item in draw(st.permutations(items)) for word in item))


@st.composite
def configuration(draw: st.DrawFn, values: Values) -> bytes:
    """A configuration file: a tree of known sections and fields (and unknown ones) with hostile values, or
    raw bytes that are no configuration at all."""
    if draw(one_in(5)):
        return draw(st.sampled_from(RAW_CONFIGS))
    tree: dict[str, Any] = {}
    for section in draw(st.lists(st.sampled_from((*SECTION_FIELDS, "nope")), max_size=3, unique=True)):
        fields = SECTION_FIELDS.get(section, ("nope",))
        names = draw(st.lists(st.sampled_from((*fields, "nope")), min_size=1, max_size=3, unique=True))
        tree[section] = {field: draw(values.fields[field]) for field in names}
    return yaml.safe_dump(tree, allow_unicode=False).encode()


@st.composite
def environment(draw: st.DrawFn, values: Values) -> tuple[tuple[str, str], ...]:
    chosen = draw(st.lists(st.sampled_from(VARIABLES), max_size=3, unique=True))
    return tuple((name, draw(values.variables[name])) for name in chosen)


@st.composite
def cases(draw: st.DrawFn, name: str, params: tuple[Parameter, ...], values: Values) -> Case:
    """A case of the command `name`: mostly a plain environment and configuration, so options are reached; now
    and then a served model (OpenAI-compatible, at the port where nothing listens, no reranker to load first),
    so a case that passes every check gets as far as its first LM call and sees the server refuse."""
    served = {f"{ENV_PREFIX}LM_MODEL": "openai/served", f"{ENV_PREFIX}RETRIEVAL_RERANKER": "none",
              f"{ENV_PREFIX}LM_API_BASE": f"http://127.0.0.1:{values.dead_port}/v1"} if draw(one_in(3)) else {}
    env = {**served, **dict(draw(environment(values)) if draw(one_in(3)) else ())}
    files = tuple((file, draw(configuration(values))) for file in ("dspy-rag.yaml", "conf.yaml") if draw(one_in(4)))
    return Case(name, draw(argv_for(name, params, values)), tuple(env.items()), files, not draw(one_in(4)))
