"""What the fuzzing campaign over the command line (fuzz_cli.py) found, each finding pinned by a plain example:
an input that once ended in an 'unexpected' error, a traceback, or an error line that did not say what to do,
and the one-line error with a remedy it gets now. One table per class of finding, fixed as a class."""

from pathlib import Path
from subprocess import CompletedProcess

import pytest
from fuzz_cli import says_what_to_do

from conftest import assert_one_line_error, invoke
from dspy_rag.errors import UserError

LONG = "a" * 300  # over the 255 bytes a file name may have: every lookup failed with ENAMETOOLONG
QUESTIONS = '{"id": "q1", "question": "Where?", "answer": "Norway"}\n'
Finding = tuple[tuple[str, ...], dict[str, str], dict[str, str], tuple[str, ...]]  # argv, env, files, needles


def run_finding(monkeypatch: pytest.MonkeyPatch, folder: Path, finding: Finding) -> None:
    """`dspy-rag ARGV` in `folder` (the working one) holding `files`, with `env` set: one error line, with the
    needles and a remedy."""
    argv, env, files, needles = finding
    monkeypatch.setenv("DSPY_RAG_CACHE", str(folder / "cache"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name, text in files.items():
        (folder / name).write_bytes(text.encode("utf-8", "surrogateescape"))
    assert_says_what_to_do(invoke(*argv), *needles)


def assert_says_what_to_do(result: CompletedProcess[str], *needles: str) -> None:
    assert_one_line_error(result, *needles)
    line = result.stderr.strip().splitlines()[-1].removeprefix("error: ")
    assert says_what_to_do(line), line


def assert_refused_with_a_remedy(refused: pytest.ExceptionInfo[UserError], *needles: str) -> None:
    message = str(refused.value)
    assert all(needle in message for needle in needles) and says_what_to_do(message), message


# --- paths: a name no file system holds, or a folder setting that names a file ----------------------------------

PATHS: list[Finding] = [
    (("config", "--config", LONG), {}, {}, ("configuration file", "use a shorter name")),
    (("config",), {"DSPY_RAG_CONFIG": LONG}, {}, ("DSPY_RAG_CONFIG", "use a shorter name")),
    (("config", "--index", LONG), {}, {}, ("'index.path'", "use a shorter name")),
    (("config",), {"DSPY_RAG_ARTIFACTS_PATH": LONG}, {}, ("'artifacts.path'", "use a shorter name")),
    (("config",), {"DSPY_RAG_WEB_SNAPSHOT_PATH": LONG}, {}, ("'web.snapshot_path'", "use a shorter name")),
    (("models",), {"DSPY_RAG_CACHE": LONG}, {}, ("DSPY_RAG_CACHE", "use a shorter name")),
    (("ingest", LONG), {}, {}, ("ingest input", "use a shorter name")),
    (("compile", "--trainset", LONG + ".yaml"), {}, {}, ("trainset", "use a shorter name")),
    (("bench", "retrieval", "--questions", LONG, "--corpus", "c.jsonl"), {}, {"c.jsonl": QUESTIONS},
     ("--questions", "use a shorter name")),
    (("train-reranker", "--questions", LONG, "--corpus", "c.jsonl"), {}, {}, ("questions or corpus file",)),
    (("config",), {}, {"dspy-rag.yaml": 'index: {path: "a\\0b"}'}, ("'index.path'", "NUL character", "remove it")),
    # a folder setting that names a file failed at its first write: a model's assembly, a snapshot's index
    (("models", "--prepare", "local/qwen2.5-coder-0.5b"), {"DSPY_RAG_CACHE": "notes.md"}, {"notes.md": "x"},
     ("DSPY_RAG_CACHE", "is a file", "name a folder for the cache")),
    (("config",), {"DSPY_RAG_ARTIFACTS_PATH": "notes.md/sub"}, {"notes.md": "x"}, ("name a folder for the artifacts",)),
    # an output option that names no place for a file failed only once the work was done, after an hour of eval
    (("eval", "--questions", "nvidia-10k", "--out", "notes.md"), {}, {"notes.md": "x"},
     ("--out: notes.md is a file", "name a folder for the results")),
    (("bench", "retrieval", "--scaling", "1000", "--json", "notes.md/x.json"), {}, {"notes.md": "x"},
     ("--json: notes.md is a file", "name a folder")),
    (("ask", "What is sold?", "--trace", "notes.md/t.json"), {}, {"notes.md": "x"}, ("--trace: notes.md is a file",)),
    (("ask", "What is sold?", "--trace", "."), {}, {}, ("--trace . is a folder", "name a file in it")),
    # as root, the atomic write's rename would have put a plain file in place of /dev/null
    (("bench", "retrieval", "--scaling", "1000", "--json", "/dev/null"), {}, {}, ("--json: /dev is in a system folder",)),
    (("history", "--plot", "/dev/x.png"), {}, {}, ("--plot: /dev is in a system folder",)),
    # walking /proc met a link no one may follow (PermissionError), after listing every process's files
    (("ingest", "/proc"), {}, {}, ("/proc is a system folder", "ingest a folder of your documents")),
]


@pytest.mark.parametrize("finding", PATHS)
def test_a_path_is_checked_where_it_enters(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, finding: Finding) -> None:
    run_finding(monkeypatch, tmp_path, finding)


def test_a_link_in_a_folder_that_may_not_be_followed_is_skipped_like_a_dangling_one(tmp_path: Path) -> None:
    from dspy_rag.index import expand_inputs

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\nText.\n")
    (tmp_path / "docs" / "b.md").symlink_to("/proc/1/cwd/b.md")  # init's folder: EACCES unless we may trace it
    assert expand_inputs([str(tmp_path / "docs")]) == ([str(tmp_path / "docs" / "a.md")], [])


def test_auto_finds_no_artifact_for_a_model_no_folder_can_be_named_after(tmp_path: Path) -> None:
    from dspy_rag import artifacts

    for model in ("openai/" + LONG, "openai/a\x00b"):
        assert artifacts.chosen("auto", tmp_path, model) is None


# --- settings that Chroma, LiteLLM, urllib or pydantic refused late, misread, or crashed on ---------------------

SETTINGS: list[Finding] = [
    (("config",), {"DSPY_RAG_INDEX_COLLECTION": "a b"}, {}, ("'index.collection'", "e.g. documents")),
    (("config",), {"DSPY_RAG_INDEX_CHROMA_URL": "not a url"}, {}, ("'index.chroma_url'", "like http://127.0.0.1")),
    (("config",), {"DSPY_RAG_LM_API_BASE": "http://127.0.0.1:99999/v1"}, {}, ("'lm.api_base'", "Port out of range")),
    (("history",), {"DSPY_RAG_MLFLOW_TRACKING_URI": "http://[::1"}, {}, ("'mlflow.tracking_uri'", "Invalid IPv6")),
    # bytes of a non-UTF-8 environment, echoed into a setting's error, broke pydantic's own error
    (("config",), {"DSPY_RAG_WEB_TAVILY_BASE_URL": "@\udcbe"}, {}, ("'web.tavily_base_url'", "@\\udcbe")),
    (("ingest", "http://[::1"), {}, {}, ("no valid URL", "check it")),
]


@pytest.mark.parametrize("finding", SETTINGS)
def test_a_setting_is_checked_where_it_enters(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              finding: Finding) -> None:
    run_finding(monkeypatch, tmp_path, finding)


def test_a_folder_that_holds_no_model_is_no_reranker(tmp_path: Path) -> None:
    from dspy_rag.reranker import CrossEncoderReranker

    with pytest.raises(UserError) as refused:
        CrossEncoderReranker(str(tmp_path))
    assert_refused_with_a_remedy(refused, "retrieval.reranker: none")


# --- error lines that said what was wrong but not what to do, or let the terminal act on what they echoed -------

ERROR_LINES: list[Finding] = [
    (("config", "--config", "\x1b[31mred\u202e.yaml"), {}, {}, ("\\x1b[31mred\\u202e.yaml",)),
    (("config",), {}, {"dspy-rag.yaml": "lm: ["}, ("line 1, column 6", "fix it there")),
    (("config",), {}, {"dspy-rag.yaml": "42"}, ("start it with `lm:`",)),
    (("config",), {}, {"dspy-rag.yaml": "lm: {model: \udcff}"}, ("not UTF-8", "save it as UTF-8")),
    (("config",), {"DSPY_RAG_LM_MODEL": "openai/x"}, {"dspy-rag.yaml": "lm: [a]"}, ("must be a mapping", "write it as")),
    (("compile", "--trainset", "nvidia-10k", "--set", "demos"), {}, {}, ("e.g. --set demos=3",)),
    (("compile", "--trainset", "nvidia-10k", "--weight", "f1"), {}, {}, ("e.g. --weight f1=0.6",)),
    (("compile", "--trainset", "nvidia-10k", "--weight", "em=0"), {}, {}, ("at least one positive", "e.g. --weight")),
    (("compile", "--trainset", "nvidia-10k", "--set", "k=2"), {}, {}, ("no setting k", "choose from demos")),
    (("compile", "--trainset", "notes.md"), {}, {"notes.md": "x"}, ("at 'top level'", "see the shipped ones")),
    (("compile", "--trainset", "binary.yaml"), {}, {"binary.yaml": "\udcff\udcfe"}, ("not UTF-8", "pass a YAML")),
    (("train-reranker", "--questions", "q.jsonl", "--corpus", "q.jsonl", "--name", "a/b"), {}, {},
     ("e.g. --name minilm",)),
    (("ingest", "empty.md"), {}, {"empty.md": ""}, ("no text to ingest", "check that it is the file you meant")),
    (("ingest", "fake.pdf"), {}, {"fake.pdf": "x"}, ("not a PDF", "rename it")),
]


@pytest.mark.parametrize("finding", ERROR_LINES)
def test_an_error_line_says_what_to_do_and_shows_what_it_echoes_as_written(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, finding: Finding) -> None:
    run_finding(monkeypatch, tmp_path, finding)


@pytest.mark.parametrize("data, needles", [(b'{"url": "u"}\n', ("s.jsonl:1 is not a snapshot record", "write each line")),
                                           (b"\xff\n", ("not UTF-8 text", "save the snapshot as UTF-8"))])
def test_a_snapshot_line_that_is_no_record_is_refused(tmp_path: Path, data: bytes, needles: tuple[str, ...]) -> None:
    from dspy_rag.web import snapshot_documents

    (tmp_path / "s.jsonl").write_bytes(data)
    with pytest.raises(UserError) as refused:
        snapshot_documents([tmp_path / "s.jsonl"])
    assert_refused_with_a_remedy(refused, *needles)


def test_a_snapshot_folder_without_pages_is_refused(tmp_path: Path) -> None:
    from dspy_rag.config import load_config
    from dspy_rag.web import web_search

    with pytest.raises(UserError) as refused:
        web_search(load_config(environ={}), str(tmp_path))
    assert_refused_with_a_remedy(refused, "holds no .jsonl", "pass a folder of pages")


def test_an_empty_web_choice_is_refused() -> None:
    from dspy_rag.config import load_config
    from dspy_rag.web import web_search

    with pytest.raises(UserError) as refused:
        web_search(load_config(environ={}), " ")
    assert_refused_with_a_remedy(refused, "--web is empty", "pass tavily, off, or the PATH")


def test_a_missing_api_key_is_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    from dspy_rag.config import LMConfig
    from dspy_rag.models import build_lm

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UserError) as refused:
        build_lm(LMConfig(model="openai/gpt-4o-mini"))
    assert_refused_with_a_remedy(refused, "needs OPENAI_API_KEY; set it in the environment")
