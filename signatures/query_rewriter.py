"""Rewrite: turn a step's sub-question into the search query most likely to find its answer."""

import dspy


class RewriteQuery(dspy.Signature):
    """Write one search query for the sub-question: keep its names, figures and the given keywords, and
    replace references such as "that company" or "the person" with what the findings name."""

    sub_question: str = dspy.InputField()
    keywords: list[str] = dspy.InputField()
    findings: list[str] = dspy.InputField(desc="what earlier steps found")
    query: str = dspy.OutputField(desc="a short keyword-rich search query")
