"""The command line as a user runs it: one-line errors, non-zero exits, and an index left intact."""

import json
from pathlib import Path

import pytest

from conftest import assert_one_line_error, invoke
from conftest import run_cli as run

SENTINEL = "sk-SENTINEL-9f8e7d6c5b4a"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a small ingested index, shared by the read-only checks below."""
    folder = tmp_path_factory.mktemp("cli")
    (folder / "notes.md").write_text("# Sales\nWidgets are sold in Norway.\n\n# Risks\nCompetitors copy gadgets.\n")
    result = run("ingest", "notes.md", cwd=folder)
    assert result.returncode == 0, result.stderr
    return folder


@pytest.fixture()
def intact(workdir: Path):
    """Asserts that the index files are byte-for-byte unchanged by the test."""
    catalog = workdir / ".dspy-rag" / "index" / "catalog.sqlite3"
    before = catalog.read_bytes()
    yield
    assert catalog.read_bytes() == before


@pytest.mark.slow
@pytest.mark.parametrize("args, needles", [
    (("ingest", "missing.htm"), ("does not exist",)),
    (("ingest", "binary.txt"), ("binary",)),
    (("ingest", "sheet.xlsx"), ("unsupported file type",)),
    (("ingest", "http://127.0.0.1:9/filing.htm"), ("cannot download", "ingest the local file")),
    (("ask", ""), ("empty",)),
    (("ask", " \t\n\x01 "), ("empty",)),
    (("ask", "x" * 100_000), ("100,000 characters",)),
    (("ask", "What is sold?", "--model", "local/nope"), ("unknown local model",)),
    (("ask", "What is sold?", "--model", "openai/gpt-4o-mini"), ("OPENAI_API_KEY",)),
    (("ask", "What is sold?", "--index", "elsewhere"), ("dspy-rag ingest",)),
    (("ask", "What is sold?", "--config", "absent.yaml"), ("does not exist",)),
    (("ask", "What is sold?", "--pipeline", "baseline", "--trace", "t.json"), ("--trace", "baseline")),
    (("ask", "What is sold?", "--index", ""), ("index.path", "empty")),
    (("ingest", "notes.md", "--index", "notes.md"), ("notes.md is a file", "name a folder")),
    (("ingest", "notes.md", "--index", "notes.md/sub"), ("lies under", "notes.md, which is a file")),
    (("ingest", "notes.md", "--index", "/dev/null"), ("system folder",)),
    (("ask", "What is sold?", "--index", "/proc/self/idx"), ("system folder",)),
    # compile's options are checked before anything is loaded or spent (a dry run too)
    (("compile", "--trainset", "nvidia-10k", "--weight", "f1=abc"), ("--weight takes a number", "f1=abc")),
    (("compile", "--trainset", "nvidia-10k", "--weight", "bogus=0.5"), ("unknown score components",)),
    (("compile", "--trainset", "nvidia-10k", "--set", "demos=abc"), ("demos takes a non-negative int",)),
    (("compile", "--trainset", "nvidia-10k", "--set", "demos=-1"), ("demos takes a non-negative int",)),
    (("compile", "--trainset", "nvidia-10k", "--dry-run", "--name", "../evil"), ("plain folder name",)),
])
def test_bad_input_gets_a_one_line_error_and_leaves_the_index_intact(
    workdir: Path, intact: None, args: tuple[str, ...], needles: tuple[str, ...]
) -> None:
    (workdir / "binary.txt").write_bytes(b"\x00\xff" * 100)
    (workdir / "sheet.xlsx").write_bytes(b"PK\x03\x04")
    assert_one_line_error(run(*args, cwd=workdir), *needles)


@pytest.mark.slow
@pytest.mark.usefixtures("shared_data")  # compile indexes the 10-K before it calls the model
def test_a_served_model_down_during_compile_is_a_one_line_error(workdir: Path) -> None:
    env = {"DSPY_RAG_LM_API_BASE": "http://127.0.0.1:9/v1", "DSPY_RAG_LM_API_KEY": "sk-unused",
           "DSPY_RAG_ARTIFACTS_PATH": str(workdir / "artifacts")}
    result = run("compile", "--trainset", "nvidia-10k", "--model", "openai/served", "--optimizer", "labeled",
                 "--train-limit", "1", "--dev-limit", "1", cwd=workdir, env=env)
    assert_one_line_error(result, "Connection refused", "lm.api_base")
    assert not (workdir / "artifacts").exists() or not any((workdir / "artifacts").iterdir())


@pytest.mark.slow
def test_an_empty_index_path_from_the_environment_is_refused(workdir: Path, intact: None) -> None:
    before = sorted(p.name for p in workdir.iterdir())
    assert_one_line_error(run("ingest", "notes.md", cwd=workdir, env={"DSPY_RAG_INDEX_PATH": ""}), "empty")
    assert sorted(p.name for p in workdir.iterdir()) == before  # no index written into the working folder


@pytest.mark.slow
def test_a_broken_config_file_is_a_one_line_error(workdir: Path, intact: None) -> None:
    (workdir / "broken.yaml").write_text("lm: [unclosed\n")
    assert_one_line_error(run("config", "--config", "broken.yaml", cwd=workdir), "not valid YAML")
    (workdir / "typo.yaml").write_text("retrieval:\n  top_kk: 3\n")
    assert_one_line_error(run("config", "--config", "typo.yaml", cwd=workdir), "retrieval.top_kk")


@pytest.mark.slow
def test_a_usage_mistake_exits_non_zero_without_a_traceback(workdir: Path) -> None:
    result = run("ask", cwd=workdir)
    assert result.returncode == 2 and "Traceback" not in result.stderr and "Missing argument" in result.stderr


@pytest.mark.parametrize(("args", "needles"), [
    (["--bogus"], ["No such option: --bogus", "see `dspy-rag --help`"]),
    (["ask", "--nope", "q"], ["No such option: --nope", "see `dspy-rag ask --help`"]),
    (["runs", "bogus"], ["No such command 'bogus'", "see `dspy-rag runs --help`"]),
    (["runs", "prune", "--to", "-1"], ["Invalid value for '--to'", "see `dspy-rag runs prune --help`"]),
    (["ingest", "--index"], ["Option '--index' requires an argument", "see the command's --help"]),
])
def test_a_usage_mistake_is_one_line_saying_where_to_look(args: list[str], needles: list[str]) -> None:
    assert_one_line_error(invoke(*args), *needles)


def test_a_command_group_given_alone_shows_its_help() -> None:
    result = invoke("runs")
    assert result.returncode == 2 and "export" in result.stdout + result.stderr and "error:" not in result.stderr


@pytest.mark.slow
def test_config_shows_precedence_and_masks_secrets(workdir: Path) -> None:
    (workdir / "dspy-rag.yaml").write_text("retrieval:\n  top_k: 7\n  top_n: 3\nlm:\n  max_tokens: 300\n")
    try:
        result = run("config", "--index", "flag-index", cwd=workdir,
                     env={"TAVILY_API_KEY": SENTINEL, "DSPY_RAG_RETRIEVAL_TOP_N": "2"})
    finally:
        (workdir / "dspy-rag.yaml").unlink()
    assert result.returncode == 0, result.stderr
    assert SENTINEL not in result.stdout + result.stderr
    assert "tavily_api_key: '**********'" in result.stdout
    assert "top_k: 7" in result.stdout and "top_n: 2" in result.stdout and "max_tokens: 300" in result.stdout
    assert "path: flag-index" in result.stdout


@pytest.mark.slow
def test_reingest_reports_unchanged(workdir: Path, intact: None) -> None:
    result = run("ingest", "notes.md", "--json", cwd=workdir)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["unchanged"] == [str((workdir / "notes.md").resolve())] and report["chunks_written"] == 0


@pytest.mark.slow
def test_models_lists_both_local_models(workdir: Path) -> None:
    rows = json.loads(run("models", "--json", cwd=workdir).stdout)
    assert [r["model"] for r in rows] == ["local/qwen2.5-coder-0.5b", "local/qwen2.5-coder-1.5b"]
    assert rows[0]["installed"]


@pytest.mark.slow
def test_markup_in_a_path_is_printed_as_written_and_breaks_nothing(tmp_path: Path) -> None:
    # Each name read as Rich markup would be eaten ("[draft]") or end the command after its write ("[/i]").
    folder = tmp_path / "reports [bold]"
    folder.mkdir()
    (folder / "[draft] notes [i].md").write_text("# Sales\nWidgets are sold in Norway.\n")
    result = run("ingest", "[draft] notes [i].md", "--index", "idx [/i]", cwd=folder)
    assert result.returncode == 0, result.stderr
    assert "[draft] notes [i].md" in result.stdout and "reports [bold]" in result.stdout
    assert "idx [/i]" in result.stdout and "MarkupError" not in result.stderr
    again = run("ingest", "[draft] notes [i].md", "--index", "idx [/i]", cwd=folder)
    assert again.returncode == 0 and "unchanged" in again.stdout and "[draft]" in again.stdout


@pytest.mark.parametrize("pasted, clean", [
    ("\x1b[31mWhat is sold?\x1b[0m", "What is sold?"),
    ("What \x1b]0;a title\x07is sold?", "What is sold?"),
    ("What\x1b[2K is\x1b(B sold?", "What is sold?"),
])
def test_terminal_escapes_leave_nothing_in_the_question(pasted: str, clean: str) -> None:
    from dspy_rag.api import clean_question

    assert clean_question(pasted) == clean


@pytest.mark.slow
def test_version(tmp_path: Path) -> None:
    from dspy_rag import __version__

    result = run("--version", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == f"dspy-rag {__version__}"
