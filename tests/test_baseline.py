"""The baseline program with a scripted LM over a real index: retrieval, the plain short-answer prompt, the
cited lead sentence and the retry."""

import dspy
import pytest
from dspy.utils import DummyLM
from dspy.utils.exceptions import AdapterParseError

from dspy_rag.index import Index
from dspy_rag.pipelines.baseline import BaselineRAG
from dspy_rag.pipelines.lm_calls import RETRY_TEMPERATURE, Unparseable
from dspy_rag.retrieval import Retriever
from dspy_rag.signatures import AnswerBriefly

pytestmark = pytest.mark.slow  # every test runs over the real 10-K index

QUESTION = "What was NVIDIA's Data Center revenue in fiscal year 2023?"


def run_scripted(index: Index, short_answer: str) -> tuple[dspy.Prediction, DummyLM]:
    lm = DummyLM([{"short_answer": short_answer}], adapter=dspy.JSONAdapter())
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        prediction = BaselineRAG(Retriever(index, top_k=10), top_n=4)(question=QUESTION)
    return prediction, lm


def test_the_answer_is_led_by_the_cited_sentence_that_states_the_short_answer(tenk_index: Index) -> None:
    prediction, lm = run_scripted(tenk_index, "$15.01 billion")
    assert len(prediction.passages) == 4 and prediction.short_answer == "$15.01 billion"
    stating = next(p for p in prediction.passages if "$15.01 billion" in p.text)
    assert [c.chunk_id for c in prediction.citations] == [stating.id]
    assert "$15.01 billion" in prediction.answer and prediction.answer.endswith(f"[{stating.section}].")
    assert prediction.flagged == []
    messages = lm.history[-1]["messages"]
    # The plain form: the one-line instruction as the system message, no JSON, no field markers.
    assert messages[0]["content"] == AnswerBriefly.instructions
    assert "[1] nvda-20230129.htm | Item" in messages[-1]["content"] and "[[ ##" not in messages[-1]["content"]
    assert messages[-1]["content"].endswith(f"Question:\n{QUESTION}")
    assert lm.history[-1]["kwargs"]["max_tokens"] == 48 and "response_format" not in lm.history[-1]["kwargs"]


def test_a_short_answer_no_passage_states_is_left_uncited_and_flagged(tenk_index: Index) -> None:
    prediction, _ = run_scripted(tenk_index, "forty two flying elephants")
    assert prediction.citations == [] and prediction.answer == "forty two flying elephants."
    assert [f["reason"] for f in prediction.flagged] == ["no citation"]


class FailingAnswer(dspy.Module):
    """The short-answer role whose first `failures` outputs do not parse; records each call's config."""

    def __init__(self, failures: int, short_answer: str) -> None:
        super().__init__()
        self.failures, self.short_answer, self.configs = failures, short_answer, []

    def __call__(self, **kwargs: object) -> dspy.Prediction:
        self.configs.append(kwargs.get("config"))
        if len(self.configs) <= self.failures:
            raise AdapterParseError("PlainAdapter", AnswerBriefly, "")
        return dspy.Prediction(short_answer=self.short_answer)


def test_output_that_does_not_parse_is_retried_once_sampled(tenk_index: Index) -> None:
    program = BaselineRAG(Retriever(tenk_index, top_k=10), top_n=4)
    program.answer = FailingAnswer(1, "$15.01 billion")
    assert program(question=QUESTION).short_answer == "$15.01 billion"
    assert program.answer.configs == [{}, {"temperature": RETRY_TEMPERATURE}]


def test_output_that_never_parses_is_unparseable_after_two_attempts(tenk_index: Index) -> None:
    program = BaselineRAG(Retriever(tenk_index, top_k=10), top_n=4)
    program.answer = FailingAnswer(5, "")
    with pytest.raises(Unparseable, match="did not parse in 2 attempts"):
        program(question=QUESTION)
    assert len(program.answer.configs) == 2
