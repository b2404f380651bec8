"""The Python API: the documented example runs as written, against a scripted LM over a real index, and
`Research` answers as `ask` does on the real local model."""

import re
from pathlib import Path

import pytest

import dspy_rag
from conftest import scratch_config
from dspy_rag.index import Index

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_documented_example_runs(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [example] = re.findall(r"```python\n(.*?)```", (DOCS / "api.md").read_text(), re.S)
    exec(compile(example, "docs/api.md", "exec"), {})  # our own documentation, run as a user would
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "$15.01 billion" and "$15.01 billion" in printed[1]
    assert any(re.fullmatch(r"1 step\(s\), \d+ LM calls", line) for line in printed)


def test_the_api_streams_the_steps_and_refuses_a_missing_index_in_one_line(workspace: Path,
                                                                          tmp_path: Path) -> None:
    heard: list[str] = []
    research = dspy_rag.Research.open(on_event=lambda _text, kind=None: heard.append(kind or "progress"))
    result = research.ask("\x1b[31mWhat was Data Center revenue?\x1b[0m")
    assert result.trajectory.question == "What was Data Center revenue?"
    assert {"plan", "step", "query", "sources", "decision"} <= set(heard)
    with pytest.raises(dspy_rag.UserError, match="dspy-rag ingest"):
        dspy_rag.Research.open(dspy_rag.load_config(overrides={"index.path": tmp_path / "empty"}))


@pytest.mark.slow
def test_research_answers_the_readme_question_on_the_real_local_model(tmp_path: Path, tenk_filing: Path) -> None:
    config = scratch_config(tmp_path)
    Index(config).ingest([str(tenk_filing)])
    result = dspy_rag.Research.open(config, pipeline="baseline").ask(
        "What was NVIDIA's Data Center revenue in fiscal year 2023?")
    assert "15.01" in result.answer and result.citations
