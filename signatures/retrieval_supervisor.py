"""Supervise retrieval: pick the recall strategy that suits the query."""

import dspy

from dspy_rag.retrieval import Strategy


class ChooseStrategy(dspy.Signature):
    """Choose how to search the documents for this query: keyword for exact names, codes and figures;
    vector for paraphrased or conceptual questions; hybrid when unsure or when both kinds of words matter."""

    query: str = dspy.InputField()
    strategy: Strategy = dspy.OutputField()
    reason: str = dspy.OutputField(desc="a few words")
