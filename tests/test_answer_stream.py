"""The short answer as the model writes it: heard through the API piece by piece, drawn on `ask`'s terminal and
replaced by its output, never in `ask --json` or a pipe; and on the real local model, token by token (slow)."""

import json
import os
import pty
import re
import subprocess
import tempfile
from pathlib import Path

import dspy
import pytest

import dspy_rag
from conftest import CLI, FakeLM, invoke, user_environment, without_times
from dspy_rag.answer_stream import listened
from dspy_rag.config import LMConfig
from dspy_rag.models import build_lm
from dspy_rag.pipelines.short_answer import ShortAnswer

QUESTION = "What was Data Center revenue in fiscal 2023?"
WRITTEN = "Answer: $15.01 billion, up 41% from a year ago"  # as a served model writes it, label and all
SHORT = "$15.01 billion, up 41% from a year ago"
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def streamed_calls(lm: FakeLM) -> list[bool]:
    return [bool(payload.get("stream")) for _, payload in lm.requests]


def test_the_api_hears_the_short_answer_as_it_is_written_and_answers_as_without(workspace: Path,
                                                                              fake_lm: FakeLM) -> None:
    fake_lm.plain_answer = WRITTEN
    research = dspy_rag.Research.open()
    heard: list[str] = []
    listened_to = research.run(QUESTION, on_token=heard.append)
    assert streamed_calls(fake_lm).count(True) == 1  # the short answer's call alone streams
    assert heard == ["$15.01", " billion", ", up 41%", " from a year", " ago"]  # whole words, the label left out
    assert "".join(heard) == listened_to.result.short_answer == SHORT
    fake_lm.requests.clear()
    alone = research.run(QUESTION)
    assert not any(streamed_calls(fake_lm))
    assert without_times(listened_to.to_json()) == without_times(alone.to_json())  # `ask --json`'s document


def on_a_terminal(*args: str, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """`dspy-rag ARGS` with its stdout on a pseudo-terminal, as a user's shell runs it: the exit code and what the
    terminal was sent, its control codes and line breaks left out."""
    leader, follower = pty.openpty()
    with tempfile.TemporaryFile() as stderr:  # a pipe left unread could fill and stall the command
        command = subprocess.Popen([CLI, *args], cwd=cwd, env=user_environment(env), stdin=subprocess.DEVNULL,
                                   stdout=follower, stderr=stderr)
        os.close(follower)
        shown = bytearray()
        while True:
            try:
                piece = os.read(leader, 65536)
            except OSError:  # EIO: the command has closed the terminal
                break
            if not piece:
                break
            shown += piece
        os.close(leader)
        code = command.wait(timeout=900)
    return code, ESCAPE.sub("", shown.decode()).replace("\r", "")


def test_ask_draws_the_answer_on_a_terminal_as_it_is_written_and_json_stays_the_document(
        workspace: Path, fake_lm: FakeLM) -> None:
    fake_lm.plain_answer = WRITTEN
    piped = invoke("ask", QUESTION)
    assert piped.returncode == 0 and not ESCAPE.search(piped.stdout) and not any(streamed_calls(fake_lm))
    code, text = on_a_terminal("ask", QUESTION, cwd=workspace, env=fake_lm.env)
    assert code == 0, text
    drafts = [text.index(f"Answer: {draft}") for draft in ("$15.01 billion", "$15.01 billion, up 41% from a year")]
    final = text.rindex(f"Answer: {SHORT}\n")
    assert drafts == sorted(drafts) and drafts[-1] < final  # drawn as it was written, then the output
    output = piped.stdout[piped.stdout.index("Answer:"):]
    assert text[final:].splitlines()[:-1] == output.splitlines()[:-1]  # the same but the time the last line reports
    fake_lm.requests.clear()
    code, document = on_a_terminal("ask", "--json", QUESTION, cwd=workspace, env=fake_lm.env)
    assert code == 0 and json.loads(document)["short_answer"] == SHORT and not any(streamed_calls(fake_lm))


@pytest.mark.slow
def test_the_local_model_streams_its_short_answer_with_the_usage_of_a_whole_reply() -> None:
    lm = build_lm(LMConfig(cache=False))
    passages = ["[1] NVIDIA's Data Center revenue for fiscal year 2023 was $15.01 billion, up 41% from a year ago."]

    def answer() -> dspy.Prediction:
        with dspy.context(lm=lm):
            return ShortAnswer()(question="What was NVIDIA's Data Center revenue in fiscal 2023?", passages=passages)

    heard: list[str] = []
    streamed = listened(answer, heard.append)
    streamed_usage = lm.history[-1]["usage"]
    whole = answer()
    assert len(heard) > 1 and "".join(heard) == streamed.short_answer == whole.short_answer
    assert "15.01" in whole.short_answer
    for count in ("prompt_tokens", "completion_tokens"):  # counted as llama.cpp counts a whole reply
        assert streamed_usage[count] == lm.history[-1]["usage"][count] > 0
