"""Route: how to handle a question, given what the documents cover."""

from typing import Literal

import dspy

Route = Literal["research", "general", "needs_more_info", "out_of_scope"]


class RouteQuestion(dspy.Signature):
    """Decide how to handle the question. research: the documents (or the web, when available) can answer it.
    general: a task or common knowledge that needs no source, such as arithmetic, a definition or a poem.
    needs_more_info: it leaves out what it asks about (which company, which year, what "it" is).
    out_of_scope: it asks for facts about something the documents do not cover and the web is not available."""

    question: str = dspy.InputField()
    coverage: str = dspy.InputField(desc="the documents' sources and section titles")
    web_available: bool = dspy.InputField()
    route: Route = dspy.OutputField()
    reason: str = dspy.OutputField(desc="one sentence")


class AnswerGenerally(dspy.Signature):
    """Answer the question or do the task from general knowledge, briefly."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()
