"""The row `dspy-rag eval` records per question and program: the answer, its scores, LM calls, tokens and
time; how a set's dev questions are asked and scored; how rows summarize and are cached.

A set is a trainset (trainsets/*.yaml, `dspy-rag trainsets`) and its questions are the dev split: for MuSiQue
and HotpotQA those the reranker holds out (never trained on), for the 10-K set its hand-made `dev` questions.
Rows are appended to a JSONL cache as they finish, so an interrupted run resumes.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dspy_rag.config import Config
from dspy_rag.evals.metrics import AnswerScores, weighted_score
from dspy_rag.index import Index
from dspy_rag.trainsets.formats import Question
from dspy_rag.trainsets.registry import Trainset
from dspy_rag.web import WebSearch

if TYPE_CHECKING:  # dspy costs ~0.4 s to import, and every CLI command loads this module
    import dspy

PIPELINES = ("plain", "baseline", "deep")
# Relative, like index.path and artifacts.path: under the working folder, never inside the installed package.
RESULTS = Path("evals") / "results"


T = TypeVar("T")


@dataclass
class Row:
    set: str
    pipeline: str
    id: str
    question: str
    gold: str
    answer: str
    em: float
    f1: float
    contains: float
    evidence_recall: float | None
    citation_validity: float | None
    lm_calls: int
    tokens: int
    seconds: float
    lm_seconds: float | None
    steps: int
    stopped_early: str | None
    # ragas (evals/ragas_bridge.py); defaults keep rows cached before them loadable.
    ragas: dict[str, float | None] | None = None  # metric -> value, None where undefined or the judge failed
    judge: str | None = None  # the model that judged ragas' LLM metrics
    judge_failed: list[str] | None = None  # the judged metrics whose judge reply failed
    failed: str | None = None  # why the program gave no answer (it scores zero and is counted, not skipped)
    ragas_inputs: dict[str, Any] | None = None  # what ragas scored, so a later judge needs no new run
    same_as: str | None = None  # the column whose run this row is: a guard's ablation where the guard never fired


@dataclass
class EvalSet:
    name: str
    questions: list[Question]
    index: Index
    web: WebSearch | None


def load_set(trainset: Trainset, config: Config) -> EvalSet:
    """A trainset's dev questions and the index (and web) they are asked against."""
    return EvalSet(trainset.name, trainset.questions("dev"), trainset.index(config), trainset.web(config))


def score(set_name: str, pipeline: str, question: Question, prediction: dspy.Prediction,
          usage: dict[str, Any]) -> Row:
    from dspy_rag.evals.research_metric import example_of, scores_of

    scores = scores_of(example_of(question), prediction)
    trajectory = getattr(prediction, "trajectory", None)
    return Row(
        set_name, pipeline, question.id, question.question, question.answer,
        prediction.short_answer or prediction.answer, scores.em, scores.f1, scores.contains, scores.evidence_recall,
        scores.citation_validity, int(usage["lm_calls"]), int(usage["tokens"]), round(usage["seconds"], 2),
        None if usage["lm_seconds"] is None else round(usage["lm_seconds"], 2),
        len(trajectory.steps) if trajectory else 1, trajectory.stopped_early if trajectory else None,
        failed=getattr(prediction, "failed", None))


def run_question(program: dspy.Module, question: Question) -> tuple[dspy.Prediction, dict[str, Any]]:
    import dspy

    from dspy_rag.models import mark, usage_after
    from dspy_rag.pipelines.lm_calls import Unparseable

    marked, started = mark(dspy.settings.lm, getattr(program, "planner_lm", None)), time.perf_counter()
    try:
        prediction = program(question=question.question)
    except Unparseable as exc:  # one question the model cannot answer must not end an evaluation of many
        prediction = dspy.Prediction(answer="", short_answer="", draft="", citations=[], passages=[], failed=str(exc))
    seconds = time.perf_counter() - started
    usage = usage_after(marked)
    trajectory = getattr(prediction, "trajectory", None)
    lm_seconds = trajectory.lm_seconds if trajectory else None  # only the deep program times its calls
    return prediction, {"lm_calls": usage["lm_calls"], "tokens": usage["prompt_tokens"] + usage["completion_tokens"],
                        "seconds": seconds, "lm_seconds": lm_seconds}


def weighted(row: Row, weights: dict[str, float]) -> float:
    """The row's score under the metric's weights: what `ResearchMetric` gives the run it records."""
    return weighted_score(AnswerScores(row.em, row.f1, row.contains, row.evidence_recall, row.citation_validity),
                          weights)


def outside_lm_share(rows: list[Row]) -> float | None:
    """Share of wall time spent outside LM calls (retrieval, rerank, bookkeeping); None when calls are untimed."""
    timed = [r for r in rows if r.lm_seconds is not None]
    total = sum(r.seconds for r in timed)
    return round(1 - sum(r.lm_seconds or 0.0 for r in timed) / total, 4) if timed and total else None


LATENCY_STEPS = (2, 3)  # the ask-latency target names two- and three-step plans; one-step runs would flatter it


def median_seconds_of_latency_steps(runs: list[tuple[int, float]]) -> float | None:
    """The median seconds of the (steps, seconds) runs of two or three steps; None when there are none."""
    seconds = [s for steps, s in runs if steps in LATENCY_STEPS]
    return round(statistics.median(seconds), 2) if seconds else None


def summarize(rows: list[Row]) -> dict[str, Any]:
    def mean(values: list[float | None]) -> float | None:
        kept = [v for v in values if v is not None]
        return round(statistics.fmean(kept), 4) if kept else None

    return {
        "questions": len(rows),
        **{name: mean([getattr(r, name) for r in rows])
           for name in ("em", "f1", "contains", "evidence_recall", "citation_validity")},
        "median_lm_calls": statistics.median(r.lm_calls for r in rows),
        "median_tokens": statistics.median(r.tokens for r in rows),
        "median_seconds": round(statistics.median(r.seconds for r in rows), 2),
        "median_steps": statistics.median(r.steps for r in rows),
        "median_seconds_2_3_steps": median_seconds_of_latency_steps([(r.steps, r.seconds) for r in rows]),
        # Means as well as medians: a stopping policy's saving shows in the mean number of steps and calls.
        "mean_steps": round(statistics.fmean(r.steps for r in rows), 2),
        "mean_lm_calls": round(statistics.fmean(r.lm_calls for r in rows), 2),
        "mean_tokens": round(statistics.fmean(r.tokens for r in rows)),
        "outside_lm_share": outside_lm_share(rows),
        "stopped_early": sum(r.stopped_early is not None for r in rows),
        "failed": sum(r.failed is not None for r in rows),
    }


Key = tuple[str, str, str]  # set, column, question id


def appended(path: Path, read: Callable[[Any], tuple[Key, T]]) -> dict[Key, T]:
    """What `read` makes of each line of a JSON-lines file an eval appends to, by key (a later line wins); a line
    cut short by an interruption, or of another shape, is skipped, and its question simply runs again."""
    found: dict[Key, T] = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        try:
            key, value = read(json.loads(line))
        except (ValueError, KeyError, TypeError):
            continue
        found[key] = value
    return found


def cached_rows(cache: Path) -> dict[Key, Row]:
    def row_of(record: Any) -> tuple[Key, Row]:
        row = Row(**record)
        return (row.set, row.pipeline, row.id), row

    return appended(cache, row_of)


def kept_trajectories(path: Path) -> dict[Key, dict[str, Any]]:
    """The deep runs' trajectories kept beside the rows."""
    return appended(path, lambda entry: ((entry["set"], entry["pipeline"], entry["id"]), entry["trajectory"]))
