"""Rules that stand over the planner, the query rewriter and the policy LM, each from a failure measured in
the local models' trajectories: a plan that keeps to the documents when the question asks for what is newer
than them, a revised plan that researches its first step again, a query that copies an earlier finding or leaves
its sub-question behind, and a FINISH or REVISE before a step that no finding so far can stand in for."""

import re

from dspy_rag.pipelines.step_answer import answer_in
from dspy_rag.pipelines.trajectory import StepRecord
from dspy_rag.signatures import Step
from dspy_rag.tokenizer import tokenize

# "Then find newer information about AMD's strategy": facts later than the user's documents, so from the web.
# Narrow on purpose: "the latest-expiring patent" or "current liabilities" are questions about the documents.
NEWER_THAN_DOCUMENTS = re.compile(
    r"\b(?:newer|newest|more recent|most recent|up[- ]to[- ]date|(?:latest|recent) (?:news|information|"
    r"developments?|announcements?|reports?))\b", re.IGNORECASE)


def routed_to_web(question: str, steps: list[Step]) -> tuple[list[Step], list[str]]:
    """When the question asks for newer facts than the documents hold and no step searches the web, the steps
    asking for them do; returns the steps and what was changed, for the trajectory."""
    if not NEWER_THAN_DOCUMENTS.search(question) or any(step.tool == "search_web" for step in steps):
        return steps, []
    routed = [step.model_copy(update={"tool": "search_web"}) if NEWER_THAN_DOCUMENTS.search(step.sub_question)
              else step for step in steps]
    changed = [f"routed to the web (the question asks for newer facts): {new.sub_question}"
               for old, new in zip(steps, routed, strict=True) if old.tool != new.tool]
    return routed, list(dict.fromkeys(changed))  # the 0.5B planner repeats steps word for word


def without_steps_done(steps: list[Step], done: list[StepRecord]) -> tuple[list[Step], list[str | None], list[str]]:
    """A revised plan without the leading steps already researched in the same words (after a REVISE the local
    models re-planned the same first step), with their answers kept for the plan's "the answer of step N" and a
    note for each. Its last step always stays: a plan that is all repeats asks to search again."""
    by_wording = {record.sub_question.strip().lower(): record for record in done}
    answers: list[str | None] = []
    notes: list[str] = []
    while len(steps) > 1 and (repeated := by_wording.get(steps[0].sub_question.strip().lower())):
        steps = steps[1:]
        answers.append(answer_in(repeated.finding, repeated.sub_question))
        notes.append(f"not researched again, found in step {repeated.index + 1}: {repeated.sub_question}")
    return steps, answers, notes


COPIED_CHARS = 40  # a query holding a finding's first 40 characters, or opening with 40 of one, copied it


def query_for(rewritten: str, sub_question: str, findings: list[str]) -> tuple[str, str | None]:
    """The rewritten query, or the sub-question, with a note saying why, when the rewriter copied an earlier
    finding (it then searches for what was already found) or wrote a query sharing no word with the
    sub-question (the 0.5B searched its planner's keyword "AI accelerator strategy" for NVIDIA's competition
    risks, and read the Business section instead of the Risk Factors)."""
    query = " ".join(rewritten.split())
    plain = query.lower()
    found = [" ".join(f.split()).lower() for f in findings]
    heads = [f[:COPIED_CHARS].rstrip(". ") for f in found]
    copied = any(len(head) >= COPIED_CHARS // 2 and head in plain for head in heads) or (
        len(plain) >= COPIED_CHARS and any(plain[:COPIED_CHARS] in f for f in found))
    if copied:
        return sub_question, "the rewritten query copied an earlier finding; searched the sub-question"
    asked = set(tokenize(sub_question))
    if query and asked and not asked & set(tokenize(query)):
        return sub_question, "the rewritten query shares no word with the sub-question; searched the sub-question"
    return query or sub_question, None


def reason_to_go_on(remaining: list[Step], searched_web: bool, web_available: bool) -> str | None:
    """Why the plan must go on rather than finish or be revised, if it must: a remaining step asks about an
    earlier step's answer, or is the plan's first web search. Both local models re-planned a chain after its
    first hop, and the 1.5B re-planned the reference question twice before its web step, until its time ran out."""
    if any(step.builds_on_earlier() for step in remaining):
        # Measured: both local models finish a chain after its first hop, "the findings answer every part".
        return "a remaining step builds on an earlier answer"
    if web_available and not searched_web and any(step.tool == "search_web" for step in remaining):
        # Findings from the documents cannot hold what the plan sends to the web (the reference question).
        return "a remaining step searches the web, which no step has yet"
    return None
