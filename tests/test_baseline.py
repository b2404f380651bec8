"""The baseline program with a scripted LM over a real index: retrieval, prompt and citation wiring."""

import dspy
import pytest
from dspy.utils import DummyLM
from dspy.utils.exceptions import AdapterParseError

from dspy_rag.index import Index
from dspy_rag.pipelines.baseline import BaselineRAG
from dspy_rag.pipelines.lm_calls import RETRY_TEMPERATURE, Unparseable
from dspy_rag.retrieval import Retriever
from dspy_rag.signatures import AnswerFromPassages

QUESTION = "What was NVIDIA's Data Center revenue in fiscal year 2023?"


def run_scripted(index: Index, reply: dict[str, object]) -> tuple[dspy.Prediction, DummyLM]:
    lm = DummyLM([reply], adapter=dspy.JSONAdapter())
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        prediction = BaselineRAG(Retriever(index, top_k=10), top_n=4)(question=QUESTION)
    return prediction, lm


def test_citations_follow_the_evidence_quote(tenk_index: Index) -> None:
    reply = {"evidence": "Data Center revenue for fiscal year 2023 was $15.01 billion",
             "answer": "It was $15.01 billion.", "cited_passages": [4], "short_answer": "$15.01 billion"}
    prediction, lm = run_scripted(tenk_index, reply)
    assert len(prediction.passages) == 4
    quoted = [p for p in prediction.passages if "$15.01 billion" in p.text]
    assert [c.chunk_id for c in prediction.citations] == [quoted[0].id]
    assert prediction.answer == f"It was $15.01 billion. [{quoted[0].section}]"
    prompt = lm.history[-1]["messages"][-1]["content"]
    assert QUESTION in prompt and "[1] nvda-20230129.htm | Item" in prompt


def test_inline_markers_win_over_the_listed_passages(tenk_index: Index) -> None:
    reply = {"evidence": "", "answer": "Revenue rose [2]. Nothing more [7].", "cited_passages": [1],
             "short_answer": "it rose"}
    prediction, _ = run_scripted(tenk_index, reply)
    second = prediction.passages[1]
    assert [c.chunk_id for c in prediction.citations] == [second.id]
    assert prediction.answer == f"Revenue rose [{second.section}]. Nothing more ."


class FailingPredict(dspy.Predict):
    """The answer predictor whose first `failures` outputs do not parse; records each call's config."""

    def __init__(self, failures: int, reply: dict[str, object]) -> None:
        super().__init__(AnswerFromPassages)
        self.failures, self.reply, self.configs = failures, reply, []

    def __call__(self, **kwargs: object) -> dspy.Prediction:
        self.configs.append(kwargs.get("config"))
        if len(self.configs) <= self.failures:
            raise AdapterParseError("JSONAdapter", AnswerFromPassages, "{\"evidence\": \"cut sh")
        return dspy.Prediction(**self.reply)


def test_output_that_does_not_parse_is_retried_once_sampled(tenk_index: Index) -> None:
    reply = {"evidence": "", "answer": "Revenue rose [2].", "cited_passages": [2], "short_answer": "it rose"}
    program = BaselineRAG(Retriever(tenk_index, top_k=10), top_n=4)
    program.answer = FailingPredict(1, reply)
    assert program(question=QUESTION).short_answer == "it rose"
    assert program.answer.configs == [{}, {"temperature": RETRY_TEMPERATURE}]


def test_output_that_never_parses_is_unparseable_after_two_attempts(tenk_index: Index) -> None:
    program = BaselineRAG(Retriever(tenk_index, top_k=10), top_n=4)
    program.answer = FailingPredict(5, {})
    with pytest.raises(Unparseable, match="did not parse in 2 attempts"):
        program(question=QUESTION)
    assert len(program.answer.configs) == 2
