"""The baseline program with a scripted LM over a real index: retrieval, prompt and citation wiring."""

import dspy
from dspy.utils import DummyLM

from dspy_rag.index import Index
from dspy_rag.pipelines.baseline import BaselineRAG
from dspy_rag.retrieval import Retriever

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
