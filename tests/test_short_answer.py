"""The plain answer form: the adapter's prompt and parse, whole short answers, the cited lead sentence, the
deep program's evidence floor, and the plain yardstick."""

from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM
from dspy.utils.exceptions import AdapterParseError, ContextWindowExceededError
from hypothesis import given
from hypothesis import strategies as st

from dspy_rag.config import BudgetConfig
from dspy_rag.index import Index
from dspy_rag.pipelines.baseline import BaselineRAG
from dspy_rag.pipelines.deep import DeepResearch
from dspy_rag.pipelines.evidence import evidence_chars, final_evidence
from dspy_rag.pipelines.lm_calls import LMCalls
from dspy_rag.pipelines.plain import INSTRUCTION, PlainRAG
from dspy_rag.pipelines.research_run import ResearchRun
from dspy_rag.pipelines.short_answer import cited_lead, settled, stating_sentence, whole_words
from dspy_rag.pipelines.synthesizer import Synthesizer
from dspy_rag.pipelines.trajectory import Trajectory
from dspy_rag.plain_adapter import PlainAdapter
from dspy_rag.retrieval import Passage, Retriever
from dspy_rag.signatures import AnswerBriefly

PASSAGES = [Passage("p1", "Gaming revenue was $9.07 billion. It fell 27%.", "10-K", "Item 7", 1.0),
            Passage("p2", "Data Center revenue for fiscal year 2023 was $15.01 billion, up 41%.", "10-K", "Item 7", 1.0)]


def test_the_plain_prompt_is_the_instruction_then_labelled_inputs_and_demos_as_turns() -> None:
    demo = {"passages": ["[1] a.md | A\nParis is in France."], "question": "Where is Paris?", "short_answer": "France"}
    messages = PlainAdapter().format(AnswerBriefly, [demo], {"passages": ["[1] b.md | B\nRome is in Italy."],
                                                            "question": "Where is Rome?"})
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"] == AnswerBriefly.instructions
    assert messages[2]["content"] == "France"
    assert messages[3]["content"] == "Passages:\n[1] b.md | B\nRome is in Italy.\n\nQuestion:\nWhere is Rome?"


@pytest.mark.parametrize(("reply", "parsed"), [
    ("Italy", "Italy"),
    ("\nAnswer: Italy\nBecause the passage says so.", "Italy"),
    ("**Short answer:** Italy", "Italy"),
    ('{"short_answer": "Italy"}', "Italy"),  # a served model, or a scripted LM, answering in JSON
])
def test_the_reply_is_its_first_line_without_a_label(reply: str, parsed: str) -> None:
    assert PlainAdapter().parse(AnswerBriefly, reply) == {"short_answer": parsed}


def test_an_empty_reply_does_not_parse_and_a_structured_signature_is_refused() -> None:
    with pytest.raises(AdapterParseError):
        PlainAdapter().parse(AnswerBriefly, "  \n ")
    with pytest.raises(AdapterParseError, match="JSON object"):
        PlainAdapter().parse(AnswerBriefly, '{"short_answer": "$15.0')
    with pytest.raises(ValueError, match="one str output"):
        PlainAdapter().parse(dspy.Signature("question -> answer, confidence"), "x")


@pytest.mark.parametrize(("reply", "cut", "whole"), [
    ("$15.01 billion, up 41% from fiscal", True, "$15.01 billion, up 41%"),
    ("$15.01 billion, up 41% from fisc", True, "$15.01 billion, up 41%"),
    ("Jack Owens,", False, "Jack Owens"),
    ("$15.01 billion, up 41% from fiscal", False, "$15.01 billion, up 41% from fiscal"),
])
def test_a_short_answer_cut_by_the_token_cap_ends_on_a_whole_word(reply: str, cut: bool, whole: str) -> None:
    assert whole_words(reply, cut) == whole


WORDS = st.sampled_from(["Answer:", "**Answer:**", "Short", "answer", "answer:", "$15.01", "billion,", "up", "41%",
                         "from", "the", "Italy", "\n", "{"])


@given(words=st.lists(WORDS, min_size=1, max_size=8))
def test_a_reply_being_written_settles_only_on_the_start_of_its_short_answer(words: list[str]) -> None:
    reply = " ".join(words)
    try:
        whole = whole_words(PlainAdapter().parse(AnswerBriefly, reply)["short_answer"], cut=False)
    except AdapterParseError:  # nothing to stream towards: the call is retried
        return
    for end in range(len(reply) + 1):  # what a listener hears stays the start of what the reply gives
        assert whole.startswith(settled(reply[:end]))
    assert settled(reply) == whole_words(whole, cut=True)


def test_the_lead_is_the_passage_sentence_stating_the_short_answer_cited() -> None:
    question = "What was Data Center revenue in fiscal 2023?"
    assert stating_sentence("$15.01 billion", question, PASSAGES) == (
        2, "Data Center revenue for fiscal year 2023 was $15.01 billion, up 41%.")
    assert cited_lead("$15.01 billion", question, PASSAGES).endswith("up 41% [2].")
    assert cited_lead("$3 trillion", question, PASSAGES) == "$3 trillion."
    assert stating_sentence("27%", "How much did Gaming fall?", PASSAGES) == (1, "It fell 27%.")  # a short figure


passage_lists = st.lists(st.builds(lambda i, n: Passage(f"p{i}", "x" * n, "s", "t", 0.0),
                                   st.integers(0, 30), st.integers(1, 400)), max_size=8)


@given(passage_lists, st.lists(passage_lists, max_size=4), st.integers(0, 3000))
def test_the_final_evidence_holds_the_floor_whole_and_each_passage_once(floor: list[Passage],
                                                                        steps: list[list[Passage]],
                                                                        chars: int) -> None:
    evidence = final_evidence(floor, steps, chars)
    ids = [p.id for p in evidence]
    assert set(ids) >= {p.id for p in floor} and len(ids) == len(set(ids))
    extra = evidence[len({p.id for p in floor}):]
    assert not extra or sum(len(p.text) for p in evidence) <= chars
    assert {p.id for p in extra} <= {p.id for s in steps for p in s}


def test_the_context_window_bounds_the_evidence() -> None:
    assert evidence_chars(4096) > 4 * 1000 and evidence_chars(2048) < evidence_chars(4096) and evidence_chars(100) == 0


@pytest.mark.slow
@pytest.mark.parametrize("question", ["What was NVIDIA's Data Center revenue in fiscal year 2023?",
                                      "Which competition risks does NVIDIA list?",
                                      "Who manufactures NVIDIA's GPUs?"])
def test_the_deep_programs_evidence_holds_the_baselines(tenk_index: Index, question: str) -> None:
    """The evidence floor: whatever the steps find, the deep program answers from at least the baseline's passages."""
    plan = {"steps": [{"sub_question": "Something else entirely: the CEO's name?", "tool": "search_docs",
                       "keywords": ["CEO"], "section": None, "justification": "a plan that drifts"}]}
    step = [{"query": "chief executive officer"}, {"strategy": "keyword", "reason": "names"},
            {"context": "Jensen Huang [1].", "used_passages": [1]}, {"finding": "Jensen Huang is the CEO."},
            {"decision": "FINISH", "reason": "done"}]
    retriever = Retriever(tenk_index, top_k=10)
    with dspy.context(lm=DummyLM([plan, *step, {"short_answer": "x"}], adapter=dspy.JSONAdapter()),
                      adapter=dspy.JSONAdapter()):
        deep = DeepResearch(retriever)(question=question)
    with dspy.context(lm=DummyLM([{"short_answer": "x"}], adapter=dspy.JSONAdapter()), adapter=dspy.JSONAdapter()):
        baseline = BaselineRAG(retriever)(question=question)
    assert {p.id for p in baseline.passages} <= {p.id for p in deep.passages}
    assert len(deep.passages) > len(baseline.passages)  # and the step's passages beside them


@pytest.mark.slow
def test_the_plain_yardstick_is_one_call_of_passages_question_and_one_line(tenk_index: Index) -> None:
    calls: list[tuple[list[dict[str, str]], int]] = []

    def lm(messages: list[dict[str, str]], max_tokens: int) -> list[str]:
        calls.append((messages, max_tokens))
        return ["$15.01 billion\nmore text"]

    with dspy.context(lm=lm):
        prediction = PlainRAG(Retriever(tenk_index, top_k=10))(
            question="What was NVIDIA's Data Center revenue in fiscal year 2023?")
    assert prediction.short_answer == "$15.01 billion" and len(prediction.passages) == 5
    [(messages, max_tokens)] = calls
    assert [m["role"] for m in messages] == ["user"] and max_tokens == 32
    assert messages[0]["content"].startswith("[1] nvda-20230129.htm | ") and messages[0]["content"].endswith(INSTRUCTION)


class FitsTwo(dspy.Module):
    """A short answer whose model overflows its context window with more than two passages."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    def forward(self, question: str, passages: list[str], config: dict[str, Any] | None = None) -> dspy.Prediction:
        self.asked.append(len(passages))
        if len(passages) > 2:
            raise ContextWindowExceededError(model="local")
        return dspy.Prediction(short_answer="$15.01 billion")


@pytest.mark.slow
def test_evidence_that_overflows_the_context_window_is_halved_with_the_questions_passages_kept(
        tenk_index: Index) -> None:
    evidence = Retriever(tenk_index, top_k=10).search("Data Center revenue fiscal 2023", "hybrid")[:8]
    synthesizer = Synthesizer()
    synthesizer.short_answer = FitsTwo()
    record = Trajectory("q", "llm", "none", "off")
    with dspy.context(lm=DummyLM([])):
        run = ResearchRun(record, LMCalls(BudgetConfig(), record.calls), lambda _kind, _text: None)
        prediction = synthesizer(question="What was Data Center revenue?", findings=[], evidence=evidence, run=run,
                                 kinds={})
    assert synthesizer.short_answer.asked == [8, 4, 2]
    assert [p.id for p in prediction.passages] == [p.id for p in evidence[:2]]
    assert prediction.short_answer == "$15.01 billion" and "first 2 passages" in record.notes[-1]
