"""ragas scores for `dspy-rag eval`: the LLM-free ones on every question, the LLM-judged ones when a judge is given.

LLM-free:
- `id_context_precision` / `id_context_recall`: ragas' ID-based context precision and recall of what the
  program read after reranking (`looked_at`) against the question's gold evidence. The ids are gold passage
  ids where the set has them (HotpotQA, MuSiQue, MultiHop-RAG); else section names (the 10-K set), a retrieved
  section taking the name of the gold section it matches as evidence recall matches sections, so the two agree.
- `string_similarity`: ragas' NonLLMStringSimilarity (1 - normalised Levenshtein distance) of the short answer
  to the gold answer, or to its closest alias.

Judged, on any `dspy.LM` (the in-process local models with grammar-constrained JSON, any LiteLLM model):
- `faithfulness` of the cited answer to the passages it was written from;
- `answer_correctness` of the short answer against the gold (ragas' 0.75 factuality + 0.25 similarity, the
  similarity from the index's embedding model);
- `context_precision` and `context_recall` of those passages against the gold answer.
A judge reply that does not parse, or a NaN score, fails that metric for that question: it is counted as a
failure and left out of the mean. ragas takes seconds to import, so it is imported on first use.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import types
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from dspy_rag.evals.metrics import same_section

if TYPE_CHECKING:
    import dspy

    from dspy_rag.embeddings import SentenceEmbedding
    from dspy_rag.retrieval import Passage
    from dspy_rag.trainsets.formats import Question

FREE_METRICS = ("id_context_precision", "id_context_recall", "string_similarity")
# Each judged metric's ragas arguments, named by the `RagasInputs` field that fills them.
JUDGED_ARGUMENTS: dict[str, dict[str, str]] = {
    "faithfulness": {"user_input": "question", "response": "answer", "retrieved_contexts": "contexts"},
    "answer_correctness": {"user_input": "question", "response": "short_answer", "reference": "gold"},
    "context_precision": {"user_input": "question", "reference": "gold", "retrieved_contexts": "contexts"},
    "context_recall": {"user_input": "question", "reference": "gold", "retrieved_contexts": "contexts"},
}
JUDGED_METRICS = tuple(JUDGED_ARGUMENTS)
HEADERS = {"id_context_precision": "ctx P ids", "id_context_recall": "ctx R ids", "string_similarity": "str sim",
           "faithfulness": "faithful", "answer_correctness": "correct", "context_precision": "ctx P judge",
           "context_recall": "ctx R judge"}

Reply = TypeVar("Reply", bound=BaseModel)


@cache
def _ragas_ready() -> None:
    """Make ragas importable, offline."""
    os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")  # else its usage analytics call home on every score
    missing = "langchain_community.chat_models.vertexai"
    # ragas 0.4.3 imports ChatVertexAI from a module that langchain-community no longer ships (ragas issue
    # #2745) and only uses it in an isinstance list, so a stand-in class lets the rest of ragas load.
    if find_spec(missing) is None:
        stand_in = types.ModuleType(missing)
        stand_in.ChatVertexAI = type("ChatVertexAI", (), {})  # type: ignore[attr-defined]
        sys.modules[missing] = stand_in


@dataclass(frozen=True)
class RagasInputs:
    """What ragas scores one answered question on."""

    question: str
    short_answer: str
    answer: str  # the cited answer
    gold: str
    aliases: tuple[str, ...] = ()
    retrieved_ids: tuple[str, ...] = ()
    gold_ids: tuple[str, ...] = ()
    contexts: tuple[str, ...] = ()  # the passages the answer was written from

    @classmethod
    def from_json(cls, fields: dict[str, Any]) -> RagasInputs:
        """Back from a cached row, where JSON turned the tuples into lists."""
        return cls(**{name: tuple(value) if isinstance(value, list) else value for name, value in fields.items()})


@dataclass(frozen=True)
class RagasScores:
    """Metric name -> value (None where undefined or where the judge failed), the judge model and the judged
    metrics whose judge reply failed (both None without a judge)."""

    values: dict[str, float | None]
    judge: str | None = None
    failed: list[str] | None = None


def context_ids(seen: Sequence[Passage], question: Question) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The retrieved and gold ids ragas compares: passage ids, or section names for a set with gold sections."""
    if question.gold_passages:
        return tuple(p.source for p in seen), question.gold_passages
    gold = question.gold_sections
    return tuple(next((g for g in gold if same_section(g, p.section)), p.section) for p in seen), gold


def inputs_of(question: Question, prediction: dspy.Prediction) -> RagasInputs:
    """One run's answers, passages and evidence ids beside the question's gold."""
    from dspy_rag.evals.research_metric import looked_at

    retrieved, gold = context_ids(looked_at(prediction), question)
    return RagasInputs(question.question, prediction.short_answer or prediction.answer, prediction.answer,
                       question.answer, question.aliases, retrieved, gold, tuple(p.text for p in prediction.passages))


def _defined(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _id_sample(retrieved_ids: Sequence[str], gold_ids: Sequence[str]) -> Any:
    _ragas_ready()
    from ragas.dataset_schema import SingleTurnSample

    return SingleTurnSample(retrieved_context_ids=list(retrieved_ids), reference_context_ids=list(gold_ids))


def id_context_precision(retrieved_ids: Sequence[str], gold_ids: Sequence[str]) -> float | None:
    """ragas' IDBasedContextPrecision: the share of distinct retrieved ids that are gold; None without gold ids
    or without retrieved ids."""
    if not gold_ids or not retrieved_ids:
        return None  # ragas would score 0 against an empty gold, and NaN (with a warning) for nothing retrieved
    sample = _id_sample(retrieved_ids, gold_ids)
    from ragas.metrics import IDBasedContextPrecision

    return float(IDBasedContextPrecision().single_turn_score(sample))


def id_context_recall(retrieved_ids: Sequence[str], gold_ids: Sequence[str]) -> float | None:
    """ragas' IDBasedContextRecall: the share of distinct gold ids among the retrieved ids; None without gold ids."""
    if not gold_ids:
        return None  # ragas would warn and return NaN
    sample = _id_sample(retrieved_ids, gold_ids)
    from ragas.metrics import IDBasedContextRecall

    return float(IDBasedContextRecall().single_turn_score(sample))


def string_similarity(answer: str, gold: str, aliases: Sequence[str] = ()) -> float:
    """ragas' NonLLMStringSimilarity (Levenshtein) of the answer to the gold or its closest alias, 0.0 to 1.0."""
    _ragas_ready()
    from ragas.metrics.collections import NonLLMStringSimilarity

    metric = NonLLMStringSimilarity()
    return max(float(metric.score(reference=reference, response=answer).value) for reference in (gold, *aliases))


def free_scores(inputs: RagasInputs) -> dict[str, float | None]:
    """The LLM-free ragas metrics of one question."""
    return {"id_context_precision": id_context_precision(inputs.retrieved_ids, inputs.gold_ids),
            "id_context_recall": id_context_recall(inputs.retrieved_ids, inputs.gold_ids),
            "string_similarity": string_similarity(inputs.short_answer, inputs.gold, inputs.aliases)}


def parse_reply(text: str, reply_model: type[Reply]) -> Reply:
    """A judge's reply as `reply_model`; ValueError (pydantic's ValidationError is one) when it is not one."""
    # Models without a JSON mode wrap the object in prose or a code fence.
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError(f"the judge replied without a JSON object: {text[:80]!r}")
    return reply_model.model_validate_json(text[start:end + 1])


class JudgeLM:
    """ragas' structured-output LLM interface (`InstructorBaseRagasLLM`) over a `dspy.LM`."""

    def __init__(self, lm: dspy.LM) -> None:
        self.lm = lm

    def _format(self, reply_model: type[BaseModel]) -> dict[str, Any]:
        """The strictest output format the model takes, as DSPy's JSONAdapter chooses it: a JSON schema (decoded
        under a grammar on the local models), JSON mode, or none (ragas' prompt spells the schema out)."""
        if "response_format" not in self.lm.supported_params:
            return {}
        return {"response_format": reply_model if self.lm.supports_response_schema else {"type": "json_object"}}

    def generate(self, prompt: str, response_model: type[Reply]) -> Reply:
        """The model's reply to the prompt, parsed as `response_model`."""
        output = self.lm(prompt, **self._format(response_model))[0]
        return parse_reply(output if isinstance(output, str) else output["text"] or "", response_model)

    async def agenerate(self, prompt: str, response_model: type[Reply]) -> Reply:
        """`generate`, for ragas' async metrics."""
        # Blocking is fine: the metrics are scored one at a time, and a local model serves one call at a time.
        return self.generate(prompt, response_model)


class JudgeEmbeddings:
    """ragas' embedding interface (`BaseRagasEmbedding`) over the index's sentence embedder."""

    def __init__(self, embedder: SentenceEmbedding) -> None:
        self.embedder = embedder

    def embed_text(self, text: str, **_: Any) -> list[float]:
        """The text's embedding."""
        return [float(x) for x in self.embedder.embed_query([text])[0]]

    async def aembed_text(self, text: str, **_: Any) -> list[float]:
        """`embed_text`, for ragas' async metrics."""
        return self.embed_text(text)


class Judge:
    """ragas' LLM metrics on one judge model, counting per metric the questions scored and those it failed."""

    def __init__(self, model: str, lm: dspy.LM, embedder: SentenceEmbedding) -> None:
        _ragas_ready()
        from ragas.embeddings.base import BaseRagasEmbedding
        from ragas.llms.base import InstructorBaseRagasLLM
        from ragas.metrics.collections import AnswerCorrectness, ContextPrecision, ContextRecall, Faithfulness

        # Registered rather than subclassed, so that this module imports without ragas.
        InstructorBaseRagasLLM.register(JudgeLM)
        BaseRagasEmbedding.register(JudgeEmbeddings)
        llm = JudgeLM(lm)
        self.model = model
        self.metrics: dict[str, Any] = {
            "faithfulness": Faithfulness(llm=llm),
            "answer_correctness": AnswerCorrectness(llm=llm, embeddings=JudgeEmbeddings(embedder)),
            "context_precision": ContextPrecision(llm=llm), "context_recall": ContextRecall(llm=llm)}
        self.scored: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()

    def _score(self, name: str, arguments: dict[str, Any]) -> float | None:
        from dspy.utils.exceptions import ContextWindowExceededError

        try:
            value = _defined(self.metrics[name].score(**arguments).value)
        except (ValueError, ContextWindowExceededError):  # an unparseable or cut-off reply, or too long a prompt
            value = None
        (self.scored if value is not None else self.failures)[name] += 1
        return value

    def judge(self, inputs: RagasInputs) -> RagasScores:
        """The judged metrics of one question. A metric whose inputs are missing (no passages, an empty answer)
        is None without counting as a failure."""
        values: dict[str, float | None] = {}
        failed: list[str] = []
        for name, sources in JUDGED_ARGUMENTS.items():
            arguments = {argument: getattr(inputs, source) for argument, source in sources.items()}
            if not all(arguments.values()):
                values[name] = None
                continue
            values[name] = self._score(name, arguments)
            if values[name] is None:
                failed.append(name)
        return RagasScores(values, self.model, failed)

    def report(self) -> str:
        """This judge's counts so far, e.g. 'faithfulness 9 scored, 1 failed; ...'."""
        return "; ".join(f"{name} {self.scored[name]} scored, {self.failures[name]} failed" for name in JUDGED_METRICS)


def ragas_scores(inputs: RagasInputs, judge: Judge | None = None) -> RagasScores:
    """Every ragas metric of one question: the LLM-free ones, and the judged ones when there is a judge."""
    free = free_scores(inputs)
    if judge is None:
        return RagasScores(free)
    judged = judge.judge(inputs)
    return RagasScores({**free, **judged.values}, judged.judge, judged.failed)


def summarize(values: Sequence[dict[str, float | None] | None],
              failed: Sequence[list[str] | None]) -> dict[str, dict[str, Any]]:
    """Per metric over a column's questions: the mean over those it scored and how many it scored; for the
    judged metrics, when any question was judged, how many the judge failed."""
    judged = any(f is not None for f in failed)
    summary: dict[str, dict[str, Any]] = {}
    for name in FREE_METRICS + (JUDGED_METRICS if judged else ()):
        kept = [v[name] for v in values if v and v.get(name) is not None]
        summary[name] = {"mean": round(statistics.fmean(kept), 4) if kept else None, "scored": len(kept)}
        if name in JUDGED_METRICS:
            summary[name]["failed"] = sum(name in (f or ()) for f in failed)
    return summary


def cell(entry: dict[str, Any] | None) -> str:
    """One summarized metric as a table cell: '0.812', or '0.812 (9 scored, 1 failed)' for a judged one."""
    if entry is None:
        return ""
    mean = "–" if entry["mean"] is None else f"{entry['mean']:.3f}"
    return mean if "failed" not in entry else f"{mean} ({entry['scored']} scored, {entry['failed']} failed)"
