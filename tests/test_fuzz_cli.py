"""The fuzzing campaign over the command line (fuzz_cli.py) at CI's budget, the rules it judges outcomes by, and
the fence that keeps its cases off real work; what it found is pinned in test_fuzz_findings.py.

    FUZZ_CLI_REPORT=fuzz.json pytest tests/test_fuzz_cli.py     # also writes the campaign's report
"""

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuzz_cases import Case, commands
from fuzz_cli import FAILED, Campaign, check_command, classify, says_what_to_do

CASES_PER_COMMAND = 200  # fourteen commands: ~2,800 cases, about half a minute of CPU


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Campaign]:
    with Campaign(tmp_path_factory.mktemp("fuzz")) as running:
        yield running
        if report := os.environ.get("FUZZ_CLI_REPORT"):
            Path(report).write_text(json.dumps(running.report(), indent=1) + "\n")


@pytest.mark.slow  # whole commands fuzzed, seconds each: the full run (CI), not the fast lane
@pytest.mark.parametrize("command", commands())
def test_no_generated_case_ends_unexpectedly_or_without_saying_what_to_do(campaign: Campaign, command: str) -> None:
    check_command(campaign, command, CASES_PER_COMMAND, strict=True)
    tally = campaign.tally[command]
    assert not any(tally[kind] for kind in FAILED), tally
    # A campaign the parser turns away at the door proves nothing about the commands behind it.
    assert tally.total() - tally["usage error"] >= CASES_PER_COMMAND // 3, tally


# --- the rules the campaign judges by -------------------------------------------------------------------------


@pytest.mark.parametrize("message, helpful", [
    ("configuration file x.yaml does not exist; create it or drop --config", True),
    ('the question is empty; ask something, e.g. dspy-rag ask "What are the key risks?"', True),
    ("cannot load reranker 'x'; offline, train one with `dspy-rag train-reranker`", True),
    ("invalid configuration at 'lm.max_tokens': Input should be a valid integer (see `dspy-rag config`)", True),
    ("--weight takes name=value, got 'f1'", False),
    ("notes.md contains no text to ingest", False),  # "to ingest" names the command, it asks nothing
    ("reranker name 'a/b' may only hold letters, digits, '-' and '_'", False),
])
def test_an_error_line_says_what_to_do_when_a_clause_starts_with_an_instruction(message: str, helpful: bool) -> None:
    assert says_what_to_do(message) is helpful


@pytest.mark.parametrize("code, stderr, kind", [
    (2, "› loading\nerror: no documents indexed in x; run `dspy-rag ingest FILE` first\n", "user error"),
    (2, "error: --weight takes name=value, got 'f1'\n", "unhelpful error"),
    (2, "error: x\x1b[31m does not exist; check the path\n", "unhelpful error"),
    (2, "error: one; check it\nerror: two; check it\n", "unhelpful error"),
    (1, "error: unexpected OSError: [Errno 36] File name too long (set DSPY_RAG_DEBUG=1 for the traceback)\n",
     "unexpected"),
    (1, "Traceback (most recent call last):\n  File ...\nValueError: x\n", "traceback"),
    (2, "Usage: dspy-rag ask [OPTIONS] QUESTION\n╭─ Error ─╮\n│ No such option: --nope │\n╰─╯\n", "usage error"),
    (1, "failed a.md: a.md contains no text to ingest; check that it is the file you meant\n", "partial failure"),
    (3, "", "other"),
])
def test_outcomes_are_told_apart_by_exit_code_and_stderr(code: int, stderr: str, kind: str) -> None:
    assert classify(code, "", stderr).kind == kind


@pytest.mark.parametrize("argv, env, stopped_at", [
    (("ask", "What is sold?"), {}, "local model"),  # the default model's weights are never read
    (("ask", "What is sold?", "--model", "openai/gpt-4o-mini"),
     {"DSPY_RAG_LM_API_KEY": "sk-000000000000", "DSPY_RAG_RETRIEVAL_RERANKER": "none"}, "network (api.openai.com)"),
    (("ask", "What is sold?", "--model", "openai/gpt-4o-mini"), {"DSPY_RAG_LM_API_KEY": "sk-000000000000"},
     "reranker"),
    (("ingest", "doc.md"), {}, "embedding model"),
    (("ingest", "http://example.com/doc.md"), {}, "network (example.com)"),
    (("compile", "--trainset", "tiny.yaml", "--dry-run"), {}, "dataset read"),
    (("models", "--prepare", "local/qwen2.5-coder-0.5b"), {}, "local model"),
    (("bench", "retrieval", "--scaling", "1000"), {}, "synthetic corpora"),
])
def test_the_fence_stops_a_case_where_real_work_would_start(campaign: Campaign, argv: tuple[str, ...],
                                                            env: dict[str, str], stopped_at: str) -> None:
    outcome = campaign.outcome(Case(argv[0], argv, tuple(env.items()), (), True))
    assert (outcome.kind, outcome.detail) == ("reached work", stopped_at)


def test_a_served_model_that_is_down_is_a_one_line_error(campaign: Campaign) -> None:
    served = {"DSPY_RAG_LM_MODEL": "openai/served", "DSPY_RAG_LM_API_BASE": f"http://127.0.0.1:{campaign.dead_port}/v1",
              "DSPY_RAG_RETRIEVAL_RERANKER": "none"}
    outcome = campaign.outcome(Case("ask", ("ask", "What is sold?"), tuple(served.items()), (), True))
    assert outcome.kind == "user error" and "Connection refused; check that openai/served's server" in outcome.detail
