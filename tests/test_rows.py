"""The answer benchmark's scoring, summary and resume, on hand-made predictions."""

import json
from dataclasses import asdict
from pathlib import Path

import dspy

from dspy_rag.evals.research_metric import looked_at
from dspy_rag.evals.rows import Row, cached_rows, score, summarize
from dspy_rag.pipelines.trajectory import Scored, StepRecord, Trajectory
from dspy_rag.retrieval import Passage
from dspy_rag.trainsets.formats import Question

MDNA = "Item 7. Management's Discussion and Analysis"
PASSAGE = Passage("c1", "Data Center revenue was $15.01 billion.", "nvda.htm", MDNA, 0.9)


def row(pipeline: str, f1: float, seconds: float, lm_seconds: float | None, steps: int = 2) -> Row:
    return Row("s", pipeline, f"q{f1}", "q?", "gold", "answer", 0.0, f1, 0.0, 1.0, None, 3, 100, seconds,
               lm_seconds, steps, None)


def test_summary_means_medians_and_time_outside_lm_calls() -> None:
    summary = summarize([row("deep", 0.5, 10.0, 9.0), row("deep", 1.0, 30.0, 28.0), row("deep", 0.0, 20.0, 19.0)])
    assert summary["f1"] == 0.5 and summary["median_seconds"] == 20.0 and summary["median_steps"] == 2
    assert summary["outside_lm_share"] == round(1 - 56 / 60, 4) and summary["citation_validity"] is None
    assert summarize([row("baseline", 1.0, 5.0, None)])["outside_lm_share"] is None


def test_the_latency_of_two_and_three_step_runs_leaves_out_the_others() -> None:
    rows = [row("deep", 0.1, 10.0, 9.0, steps=1), row("deep", 0.2, 40.0, 39.0, steps=2),
            row("deep", 0.3, 60.0, 58.0, steps=3), row("deep", 0.4, 200.0, 190.0, steps=4)]
    assert summarize(rows)["median_seconds_2_3_steps"] == 50.0
    assert summarize(rows[:1])["median_seconds_2_3_steps"] is None


def test_a_truncated_cache_line_is_run_again(tmp_path: Path) -> None:
    cache = tmp_path / "rows.jsonl"
    done = row("deep", 1.0, 10.0, 9.0)
    cache.write_text(json.dumps(asdict(done)) + "\n" + json.dumps(asdict(row("deep", 0.5, 1, 1)))[:40])
    assert cached_rows(cache) == {("s", "deep", "q1.0"): done}


def test_deep_rows_score_every_passage_the_steps_read() -> None:
    trajectory = Trajectory("q?", "llm", "none", "off")
    trajectory.steps = [StepRecord(0, "a?", "search_docs", [], None, "", reranked=[Scored.of(PASSAGE)])]
    prediction = dspy.Prediction(answer="It was $15.01 billion [Item 7].", short_answer="15.01 billion dollars",
                                 draft="It was $15.01 billion [1].", passages=[PASSAGE], trajectory=trajectory)
    question = Question("n1", "Data Center revenue?", "$15.01 billion", gold_sections=("Item 7",))
    usage = {"lm_calls": 7, "tokens": 900, "seconds": 20.0, "lm_seconds": 18.5}
    scored = score("nvidia-10k", "deep", question, prediction, usage)
    assert [p.section for p in looked_at(prediction)] == [MDNA]
    assert (scored.contains, scored.evidence_recall, scored.citation_validity) == (1.0, 1.0, 1.0)
    assert scored.em == 0.0 and scored.f1 == 0.8 and scored.steps == 1  # the short answer is what is scored
    assert scored.answer == "15.01 billion dollars"
