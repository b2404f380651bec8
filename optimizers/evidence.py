"""Passages for the short answer's labeled demos where the dataset gives gold sections but no gold paragraphs (the
10-K set): retrieved from the question's own set's index within its gold sections, and kept only where they state
the gold answer, so a demo never shows an answer its passages do not hold."""

from collections.abc import Mapping

import dspy

from dspy_rag.citations import number_passages
from dspy_rag.evals.metrics import answer_contains
from dspy_rag.retrieval import Passage, Retriever

PASSAGES = 2  # each a whole chunk: more would crowd a 4,096-token window once several demos are shown


def found_evidence(example: dspy.Example, retriever: Retriever) -> list[Passage]:
    """The passages of the gold sections that state the answer, best ranked first."""
    found = {p.id: p for section in example.gold_sections for p in retriever.search(example.question, section=section)
             if answer_contains(p.text, example.short_answer, example.aliases)}
    return sorted(found.values(), key=lambda p: -p.score)[:PASSAGES]


def with_found_evidence(examples: list[dspy.Example], retrievers: Mapping[str, Retriever]) -> list[dspy.Example]:
    """The examples, those with gold sections and no passages given the passages found for them (when any are)."""
    labeled = []
    for example in examples:
        if example.get("passages") is None and example.gold_sections:
            if found := found_evidence(example, retrievers[example.trainset]):
                example = example.copy(passages=number_passages(found))
        labeled.append(example)
    return labeled
