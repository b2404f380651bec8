"""Plan: turn the question into research steps, each with a tool, keywords and a likely section."""

import re
from typing import Literal

import dspy
from pydantic import BaseModel, Field

Tool = Literal["search_docs", "search_web"]
# How a plan step names what an earlier step found: "the answer of step 1" (as gold plans write it) or "#1".
EARLIER_ANSWER = re.compile(r"\bthe answer (?:of|to|from) step (\d+)|#(\d+)", re.IGNORECASE)


class Step(BaseModel):
    sub_question: str = Field(description="one self-contained question this step answers")
    tool: Tool = Field(description="search_docs for the user's documents, search_web for newer or outside facts")
    keywords: list[str] = Field(default_factory=list, description="names, figures and terms to search for")
    section: str | None = Field(None, description="the document section most likely to hold the answer, if known")
    justification: str = Field("", description="why this step is needed, in a few words")

    def builds_on_earlier(self) -> bool:
        """Whether this step asks about an earlier step's answer: the next hop of a chain, which no finding
        made before it can have answered."""
        return bool(EARLIER_ANSWER.search(self.sub_question))

    def renumbered(self, numbers: dict[int, int]) -> "Step":
        """This step with each reference to an earlier step's answer pointing at `numbers[N]` instead of step N."""
        def renumber(match: re.Match[str]) -> str:
            number = int(match.group(1) or match.group(2))
            new = numbers.get(number, number)
            return match.group(0).replace(str(number), str(new)) if new != number else match.group(0)
        return self.model_copy(update={"sub_question": EARLIER_ANSWER.sub(renumber, self.sub_question)})

    def resolved(self, answers: list[str | None]) -> "Step":
        """This step with each reference to an earlier step's answer replaced by that answer, when known.
        The local models copy "the answer of step 1" into the search query instead of the name it stands for."""
        def answer(match: re.Match[str]) -> str:
            number = int(match.group(1) or match.group(2))
            found = answers[number - 1] if 1 <= number <= len(answers) else None
            return found or match.group(0)
        return self.model_copy(update={"sub_question": EARLIER_ANSWER.sub(answer, self.sub_question)})


class PlanResearch(dspy.Signature):
    """Break the question into the fewest research steps that answer it, in order; one step when one
    search suffices, two or three when the question joins facts. Use search_docs for facts in the user's
    documents and search_web only for facts the documents cannot hold (newer events, other companies).
    When findings are given, plan only the steps still needed."""

    question: str = dspy.InputField()
    sections: list[str] = dspy.InputField(desc="sections of the user's documents (empty when unknown)")
    web_available: bool = dspy.InputField(desc="whether search_web can be used")
    findings: list[str] = dspy.InputField(desc="what earlier steps found (empty at the start)")
    steps: list[Step] = dspy.OutputField(desc="one to four steps")
