"""The ragas bridge: LLM-free metrics worked out by hand, judge failures counted and never averaged, the ragas
columns of `dspy-rag eval` (scripted LMs), and one judge run against llama.cpp's OpenAI-compatible server (slow)."""

import json
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.lm15 import Message, Request, Response, TextPart, Usage, response_to_events
from dspy.utils import DummyLM
from pydantic import BaseModel
from rich.console import Console
from test_evaluate import eval_cli

from conftest import REPLIES, free_port, running_server
from dspy_rag import models
from dspy_rag.cli import measure
from dspy_rag.config import LMConfig
from dspy_rag.evals import stored_runs
from dspy_rag.evals.ragas_bridge import (
    JUDGED_METRICS,
    Judge,
    RagasInputs,
    cell,
    context_ids,
    id_context_precision,
    id_context_recall,
    parse_reply,
    ragas_scores,
    string_similarity,
    summarize,
)
from dspy_rag.evals.rows import cached_rows
from dspy_rag.retrieval import Passage
from dspy_rag.trainsets.formats import Question

JUDGE = "local/judge"
STATEMENT = "Data Center revenue for fiscal year 2023 was $15.01 billion."
# A valid reply to each of ragas' reply models, by the model's name (which DSPy sends as the schema's name).
VALID = {
    "StatementGeneratorOutput": {"statements": [STATEMENT]},
    "NLIStatementOutput": {"statements": [{"statement": STATEMENT, "reason": "stated", "verdict": 1}]},
    "ClassificationWithReason": {"TP": [{"statement": STATEMENT, "reason": "same figure"}], "FP": [], "FN": []},
    "ContextPrecisionOutput": {"reason": "states the figure", "verdict": 1},
    "ContextRecallOutput": {"classifications": [{"statement": STATEMENT, "reason": "in passage 1", "attributed": 1}]},
}
INPUTS = RagasInputs(question="What was Data Center revenue in fiscal 2023?", short_answer="$15.01 billion",
                     answer=f"{STATEMENT} [1]", gold="$15.01 billion", retrieved_ids=("p1", "p2"), gold_ids=("p1",),
                     contexts=(STATEMENT, "Gaming revenue was $9.07 billion."))


class ScriptedJudge:
    """An engine for `dspy.LM` that answers each reply model with the JSON scripted for it, and anything else
    with prose no parser takes; it records the reply models it was asked for."""

    supports_response_schema = True
    supported_params = frozenset({"temperature", "max_tokens", "response_format"})

    def __init__(self, replies: dict[str, dict[str, Any]]) -> None:
        self.replies = replies
        self.asked: list[str | None] = []

    def complete(self, request: Request) -> Response:
        name = (request.config.response_format or {}).get("name")
        self.asked.append(name)
        text = json.dumps(self.replies[name]) if name in self.replies else "Sure! The statements look fine to me."
        return Response(id="judge", model="judge", message=Message.assistant([TextPart(text)]), finish_reason="stop",
                        usage=Usage(input_tokens=10, output_tokens=10))

    def stream(self, request: Request) -> Iterator[Any]:
        return response_to_events(self.complete(request))

    def close(self) -> None:
        pass


class FixedEmbedder:
    """Every text on the same vector: answer correctness' similarity part is then 1.0."""

    def embed_query(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]


def judge_with(replies: dict[str, dict[str, Any]]) -> tuple[Judge, ScriptedJudge]:
    engine = ScriptedJudge(replies)
    return Judge(JUDGE, dspy.LM(JUDGE, engine=engine, cache=False, num_retries=0), FixedEmbedder()), engine


def test_id_precision_and_recall_by_hand() -> None:
    # distinct retrieved {a, b, c}, of which a is gold: precision 1/3; gold {a, d}, of which a was retrieved: 1/2
    assert id_context_precision(["a", "b", "c", "a"], ["a", "d"]) == pytest.approx(1 / 3)
    assert id_context_recall(["a", "b", "c", "a"], ["a", "d"]) == pytest.approx(1 / 2)
    assert id_context_precision(["a", "d"], ["d", "a"]) == id_context_recall(["a", "d"], ["d", "a"]) == 1.0
    assert id_context_precision([], ["a"]) is None and id_context_recall([], ["a"]) == 0.0
    assert id_context_precision(["a"], []) is None and id_context_recall(["a"], []) is None


def test_string_similarity_by_hand() -> None:
    assert string_similarity("$15.01 billion", "$15.01 billion") == 1.0
    assert string_similarity("abc", "xyz") == 0.0
    assert string_similarity("kitten", "sitting") == pytest.approx(1 - 3 / 7)  # 3 edits over the longer 7
    assert string_similarity("Jensen Huang", "Jen-Hsun Huang", aliases=["Jensen Huang"]) == 1.0


def test_sections_stand_for_ids_where_a_set_has_no_gold_passages() -> None:
    seen = [Passage("c1", "", "10k.htm", "Item 7. Management's Discussion and Analysis", 1.0),
            Passage("c2", "", "10k.htm", "Item 1A. Risk Factors", 0.9),
            Passage("c3", "", "10k.htm", "ITEM 7.", 0.8)]
    by_sections = Question("q", "?", "x", gold_sections=("Item 7", "Item 8"))
    retrieved, gold = context_ids(seen, by_sections)
    assert retrieved == ("Item 7", "Item 1A. Risk Factors", "Item 7") and gold == ("Item 7", "Item 8")
    assert id_context_precision(retrieved, gold) == 0.5 and id_context_recall(retrieved, gold) == 0.5
    by_passages = Question("q", "?", "x", gold_passages=("10k.htm",), gold_sections=("Item 8",))
    assert context_ids(seen, by_passages) == (("10k.htm",) * 3, ("10k.htm",))


class Verdict(BaseModel):
    reason: str
    verdict: int


def test_a_reply_parses_inside_prose_or_a_fence_and_garbage_raises() -> None:
    assert parse_reply('Here it is:\n```json\n{"reason": "r", "verdict": 1}\n```', Verdict).verdict == 1
    for garbage in ("no JSON here", '{"reason": "r"}', '{"reason": "r", "verdict": "yes"}', '{"reason": "r", '):
        with pytest.raises(ValueError):
            parse_reply(garbage, Verdict)


def test_a_judge_that_replies_well_scores_every_metric_under_its_json_schema() -> None:
    judge, engine = judge_with(VALID)
    scores = ragas_scores(INPUTS, judge)
    assert {name: scores.values[name] for name in JUDGED_METRICS} == pytest.approx(
        {"faithfulness": 1.0, "answer_correctness": 1.0, "context_precision": 1.0, "context_recall": 1.0})
    assert scores.judge == JUDGE and scores.failed == []
    assert scores.values["id_context_precision"] == 0.5 and scores.values["id_context_recall"] == 1.0
    assert set(engine.asked) == set(VALID)  # every call asked for its reply model's schema
    assert judge.report() == ("faithfulness 1 scored, 0 failed; answer_correctness 1 scored, 0 failed; "
                              "context_precision 1 scored, 0 failed; context_recall 1 scored, 0 failed")


def test_garbage_from_the_judge_is_counted_per_metric_not_scored() -> None:
    judge, _ = judge_with({})
    scores = ragas_scores(INPUTS, judge)
    assert scores.failed == list(JUDGED_METRICS)
    assert all(scores.values[name] is None for name in JUDGED_METRICS)
    assert scores.values["string_similarity"] == 1.0  # the LLM-free metrics do not need the judge
    assert dict(judge.failures) == dict.fromkeys(JUDGED_METRICS, 1) and not judge.scored


def test_one_garbled_reply_fails_only_its_metric() -> None:
    judge, _ = judge_with({name: reply for name, reply in VALID.items() if name != "NLIStatementOutput"})
    scores = judge.judge(INPUTS)
    assert scores.failed == ["faithfulness"] and scores.values["faithfulness"] is None
    assert scores.values["context_recall"] == 1.0


def test_a_judge_that_finds_no_statement_fails_instead_of_scoring_nan() -> None:
    judge, _ = judge_with({**VALID, "StatementGeneratorOutput": {"statements": []}})
    assert "faithfulness" in judge.judge(INPUTS).failed  # ragas scores NaN here


def test_metrics_without_their_inputs_are_undefined_not_failed() -> None:
    judge, engine = judge_with({})
    no_passages = RagasInputs("What?", "x", "x", "y")
    scores = judge.judge(no_passages)
    assert scores.values == dict.fromkeys(JUDGED_METRICS) and scores.failed == ["answer_correctness"]
    assert set(engine.asked) == {"StatementGeneratorOutput"}  # only answer correctness asked the judge


def test_summaries_average_only_scored_questions_and_count_failures() -> None:
    values = [{"string_similarity": 1.0, "faithfulness": 0.5}, {"string_similarity": 0.0, "faithfulness": None},
              None]  # a row cached before ragas
    summary = summarize(values, [[], ["faithfulness"], None])
    assert summary["string_similarity"] == {"mean": 0.5, "scored": 2}
    assert summary["faithfulness"] == {"mean": 0.5, "scored": 1, "failed": 1}
    assert summary["context_recall"] == {"mean": None, "scored": 0, "failed": 0}
    assert cell(summary["faithfulness"]) == "0.500 (1 scored, 1 failed)" and cell(summary["string_similarity"]) == "0.500"
    assert set(summarize(values, [None, None, None])) == {"id_context_precision", "id_context_recall",
                                                           "string_similarity"}  # never judged: no judged columns


def test_rows_cached_before_ragas_still_load(tmp_path: Path) -> None:
    old = {"set": "s", "pipeline": "deep@m", "id": "q1", "question": "?", "gold": "x", "answer": "x", "em": 1.0,
           "f1": 1.0, "contains": 1.0, "evidence_recall": None, "citation_validity": None, "lm_calls": 1,
           "tokens": 10, "seconds": 1.0, "lm_seconds": None, "steps": 1, "stopped_early": None}
    (tmp_path / "rows.jsonl").write_text(json.dumps(old) + "\n")
    row = cached_rows(tmp_path / "rows.jsonl")[("s", "deep@m", "q1")]
    assert row.ragas is None and row.judge is None and row.judge_failed is None


# The eval CLI: the scripted deep program over two facts under two headings, gold sections per question.
FACTS = ("# Revenue\n\nNVIDIA's Data Center revenue for fiscal year 2023 was $15.01 billion, up 41% from a year ago.\n\n"
         "# Leadership\n\nJensen Huang is the founder and chief executive officer of NVIDIA.\n")


@pytest.fixture()
def sectioned_trainset(tmp_path: Path) -> Path:
    """The scripted run reads both sections, for each question: q5's gold is one of them, q6's neither."""
    (tmp_path / "facts.md").write_text(FACTS)
    rows = [{"id": "q5", "question": "What was Data Center revenue?", "answer": "$15.01 billion", "split": "dev",
             "gold_sections": ["Revenue"]},
            {"id": "q6", "question": "Who leads NVIDIA?", "answer": "Jensen Huang", "split": "dev",
             "gold_sections": ["Products"]}]
    (tmp_path / "qs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "tiny.yaml").write_text("name: tiny\ndescription: two facts\nquestions: qs.jsonl\n"
                                        "documents: [facts.md]\nsplit: {field: split}\n")
    return tmp_path / "tiny.yaml"


@pytest.fixture()
def scripted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Scripted LMs for the programs and a judge that answers garbage; the models built, by name."""
    built: list[str] = []

    def build_lm(config: LMConfig) -> dspy.LM:
        built.append(config.model)
        if config.model == JUDGE:
            return dspy.LM(JUDGE, engine=ScriptedJudge({}), cache=False, num_retries=0)
        return DummyLM(REPLIES, adapter=dspy.JSONAdapter())

    monkeypatch.setattr(models, "build_lm", build_lm)
    monkeypatch.setattr(measure, "out", Console(width=400, soft_wrap=True))  # the whole table on one line
    (tmp_path / "dspy-rag.yaml").write_text(f"artifacts: {{path: {tmp_path / 'artifacts'}}}\n"
                                            f"index: {{path: {tmp_path / 'index'}}}\nretrieval: {{reranker: none}}\n")
    return built


def test_eval_reports_the_ragas_columns_and_the_judge_failures(sectioned_trainset: Path, tmp_path: Path,
                                                                scripted: list[str]) -> None:
    result = eval_cli(sectioned_trainset, tmp_path / "out", "--judge", JUDGE)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    ragas = report["columns"]["deep@qwen2.5-coder-0.5b"]["ragas"]
    assert ragas["id_context_precision"] == {"mean": 0.25, "scored": 2}  # q5 1 of 2 sections read, q6 0 of 2
    assert ragas["id_context_recall"] == {"mean": 0.5, "scored": 2}  # q5 found its one gold section, q6 not
    assert ragas["string_similarity"]["scored"] == 2
    assert all(ragas[name] == {"mean": None, "scored": 0, "failed": 2} for name in JUDGED_METRICS)
    rows = report["rows"]["deep@qwen2.5-coder-0.5b"]
    assert rows[0]["ragas"]["string_similarity"] == 1.0 and rows[1]["ragas"]["string_similarity"] < 0.5
    assert all(r["judge"] == JUDGE and r["judge_failed"] == list(JUDGED_METRICS) for r in rows)
    assert sorted(scripted) == [JUDGE, "local/qwen2.5-coder-0.5b"]  # each model built once
    for header in ("ctx P ids", "ctx R ids", "str sim", "faithful", "correct", "ctx P judge", "ctx R judge"):
        assert header in result.output
    assert "– (0 scored, 2 failed)" in result.output and "faithfulness 0 scored, 2 failed" in result.output
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "| id_context_precision | id_context_recall | string_similarity | faithfulness |" in markdown
    assert "| 0.250 | 0.500 |" in markdown


def test_a_judge_reasks_only_the_rows_it_did_not_judge(sectioned_trainset: Path, tmp_path: Path,
                                                       scripted: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    real = stored_runs.run_question
    monkeypatch.setattr(stored_runs, "run_question", lambda program, question: (asked.append(question.id),
                                                                                real(program, question))[1])
    assert eval_cli(sectioned_trainset, tmp_path / "out").exit_code == 0
    without = json.loads((tmp_path / "out" / "results.json").read_text())["columns"]["deep@qwen2.5-coder-0.5b"]
    assert "faithfulness" not in without["ragas"]
    assert eval_cli(sectioned_trainset, tmp_path / "out", "--judge", JUDGE).exit_code == 0
    judged = json.loads((tmp_path / "out" / "results.json").read_text())["rows"]["deep@qwen2.5-coder-0.5b"]
    assert all(r["judge"] == JUDGE for r in judged)
    assert eval_cli(sectioned_trainset, tmp_path / "out", "--judge", JUDGE).exit_code == 0
    assert asked == ["q5", "q6"]  # the judge read the cached answers; nothing was asked again
    assert [r["answer"] for r in judged] == [r["short_answer"] for r in (row["ragas_inputs"] for row in judged)]


def test_rows_cached_without_their_ragas_inputs_are_run_again_for_a_judge(
        sectioned_trainset: Path, tmp_path: Path, scripted: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    real = stored_runs.run_question
    monkeypatch.setattr(stored_runs, "run_question", lambda program, question: (asked.append(question.id),
                                                                                real(program, question))[1])
    assert eval_cli(sectioned_trainset, tmp_path / "out").exit_code == 0
    with sqlite3.connect(tmp_path / "runs.sqlite") as db:  # runs stored before rows kept their ragas inputs
        for key, payload in db.execute("SELECT key, payload FROM runs").fetchall():
            older = json.loads(payload)
            older["row"]["ragas_inputs"] = None
            db.execute("UPDATE runs SET payload = ? WHERE key = ?", (json.dumps(older), key))
    assert eval_cli(sectioned_trainset, tmp_path / "out", "--judge", JUDGE).exit_code == 0
    assert asked == ["q5", "q6", "q5", "q6"]


@pytest.mark.slow
def test_a_real_judge_over_an_openai_compatible_server_scores_or_counts_every_metric() -> None:
    """The 0.5B model behind llama.cpp's server, through LiteLLM (JSON mode is the server's to refuse, so the
    prompt carries the schema): every judged metric is scored within [0, 1] or counted as failed."""
    port = free_port()
    gguf = models.ensure_local_model(models.lookup("local/qwen2.5-coder-0.5b"))
    base = f"http://127.0.0.1:{port}/v1"
    with running_server([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "qwen",
                         "--host", "127.0.0.1", "--port", str(port), "--n_threads", "2", "--n_ctx", "4096"],
                        f"{base}/models"):
        lm = models.build_lm(LMConfig(model="openai/qwen", api_base=base, max_tokens=400))
        judge = Judge("openai/qwen", lm, FixedEmbedder())
        scores = judge.judge(INPUTS)
    assert len(lm.history) >= 4  # the server was asked
    for name in JUDGED_METRICS:
        value = scores.values[name]
        assert (value is None) == (name in scores.failed)
        assert value is None or 0.0 <= value <= 1.0
        assert judge.scored[name] + judge.failures[name] == 1
