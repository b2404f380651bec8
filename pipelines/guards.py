"""Guards: named, pure checks that stand over the planner, the query rewriter and the policy LM, each against a
failure measured in the local models' trajectories.

One interface: a guard reads a module's output (and what it needs of the run so far) and returns it, changed or
not, with a `Fired` record when it changed it: what it saw, what it changed, and why. Each guard is on or off by
configuration (`guards:` in dspy-rag.yaml, e.g. `guards: {query_guard: false}`); the deep program writes every
firing into the trajectory as it happens, and `dspy-rag eval --without GUARD` measures a guard's worth as a
column of its own on the same questions.

- web_routing: a plan that keeps to the documents when the question asks for what is newer than them.
- repeated_step: a plan that researches a step already done, or one of its own steps again, word for word.
- query_guard: a rewritten query that copies an earlier finding or leaves its sub-question behind.
- keep_going: a stop (FINISH or REVISE) before a step no finding so far can stand in for; decided before the
  policy is asked, so a forced step costs no policy call.
- injection (pipelines/injection_guard.py): passage text that forges the prompt's structure or orders the
  assistant, removed before any LM call reads it.
"""

import re
from dataclasses import dataclass

from dspy_rag.pipelines.step_answer import answer_in
from dspy_rag.pipelines.trajectory import StepRecord
from dspy_rag.signatures import Step
from dspy_rag.tokenizer import tokenize


@dataclass(frozen=True)
class Fired:
    """One firing of a guard: which, what it saw, what it changed, why; the step it fired in, if any."""

    guard: str
    saw: str
    changed: str
    why: str
    step: int | None = None

# "Then find newer information about AMD's strategy": facts later than the user's documents, so from the web.
# Narrow on purpose: "the latest-expiring patent" or "current liabilities" are questions about the documents.
NEWER_THAN_DOCUMENTS = re.compile(
    r"\b(?:newer|newest|more recent|most recent|up[- ]to[- ]date|(?:latest|recent) (?:news|information|"
    r"developments?|announcements?|reports?))\b", re.IGNORECASE)


def routed_to_web(question: str, steps: list[Step]) -> tuple[list[Step], list[Fired]]:
    """web_routing: when the question asks for newer facts than the documents hold and no step searches the web,
    the steps asking for them do."""
    if not NEWER_THAN_DOCUMENTS.search(question) or any(step.tool == "search_web" for step in steps):
        return steps, []
    routed = [step.model_copy(update={"tool": "search_web"}) if NEWER_THAN_DOCUMENTS.search(step.sub_question)
              else step for step in steps]
    changed = dict.fromkeys(new.sub_question for old, new in zip(steps, routed, strict=True) if old.tool != new.tool)
    return routed, [Fired("web_routing", f"a documents step: {sub_question}", "sent it to the web",
                          "the question asks for newer facts than the documents hold")
                    for sub_question in changed]  # the 0.5B planner repeats steps word for word: noted once


def without_steps_done(steps: list[Step], done: list[StepRecord]) -> tuple[list[Step], list[str | None], list[Fired]]:
    """repeated_step: a revised plan without the leading steps already researched in the same words (after a
    REVISE the local models re-planned the same first step), with their answers kept for the plan's "the answer
    of step N". Its last step always stays: a plan that is all repeats asks to search again. Then the plan
    without its own repeats (see `without_repeats`)."""
    by_wording = {wording(record.sub_question): record for record in done}
    answers: list[str | None] = []
    fired: list[Fired] = []
    while len(steps) > 1 and (repeated := by_wording.get(wording(steps[0].sub_question))):
        steps = steps[1:]
        answers.append(answer_in(repeated.finding, repeated.sub_question))
        fired.append(Fired("repeated_step", f"a planned step: {repeated.sub_question}", "skipped it",
                           f"step {repeated.index + 1} researched it in the same words"))
    steps, repeats = without_repeats(steps, len(answers))
    return steps, answers, fired + repeats


def wording(sub_question: str) -> str:
    return " ".join(sub_question.split()).lower()


def without_repeats(steps: list[Step], done: int) -> tuple[list[Step], list[Fired]]:
    """The plan's steps (numbered from `done` + 1) with each step that asks an earlier one's question in the same
    words of the same source dropped (the 0.5B planner writes a one-hop question two to four times; the web, then
    the documents, is no repeat), and "the answer of step N" renumbered: to the kept step's new number, or to the
    step a dropped repeat repeated."""
    kept: list[Step] = []
    first: dict[tuple[str, str], int] = {}  # (tool, wording) -> its number in the kept plan
    numbers = {n: n for n in range(1, done + 1)}  # plan number -> kept number
    copies: dict[int, int] = {}  # kept number -> repeats of it dropped
    for number, step in enumerate(steps, start=done + 1):
        asked = (step.tool, wording(step.sub_question))
        if (earlier := first.get(asked)) is not None:
            numbers[number] = earlier
            copies[earlier] = copies.get(earlier, 0) + 1
            continue
        kept.append(step)
        numbers[number] = first[asked] = done + len(kept)
    fired = [Fired("repeated_step", f"a planned step: {kept[kept_number - done - 1].sub_question}",
                   "skipped it" if n == 1 else f"skipped {n} copies",
                   f"the plan asks step {kept_number}'s question again in the same words")
             for kept_number, n in copies.items()]  # noted once per step repeated
    return ([step.renumbered(numbers) for step in kept] if fired else kept), fired


COPIED_CHARS = 40  # a query holding a finding's first 40 characters, or opening with 40 of one, copied it


def query_for(rewritten: str, sub_question: str, findings: list[str]) -> tuple[str, Fired | None]:
    """query_guard: the rewritten query, or the sub-question when the rewriter copied an earlier finding (it then
    searches for what was already found) or wrote a query sharing no word with the sub-question (the 0.5B
    searched its planner's keyword "AI accelerator strategy" for NVIDIA's competition risks, and read the
    Business section instead of the Risk Factors)."""
    query = " ".join(rewritten.split())
    plain = query.lower()
    found = [wording(f) for f in findings]
    heads = [f[:COPIED_CHARS].rstrip(". ") for f in found]
    copied = any(len(head) >= COPIED_CHARS // 2 and head in plain for head in heads) or (
        len(plain) >= COPIED_CHARS and any(plain[:COPIED_CHARS] in f for f in found))
    asked = set(tokenize(sub_question))
    unrelated = bool(query and asked and not asked & set(tokenize(query)))
    if copied or unrelated:
        why = "it copied an earlier finding" if copied else "it shares no word with the sub-question"
        return sub_question, Fired("query_guard", f"the query: {query}", "searched the sub-question instead", why)
    return query or sub_question, None


def must_go_on(remaining: list[Step], searched_web: bool, web_available: bool) -> Fired | None:
    """keep_going: the plan goes on, whatever the policy would say, when a remaining step asks about an earlier
    step's answer or is the plan's first web search. Both local models re-planned a chain after its first hop
    ("the findings answer every part"), and the 1.5B re-planned the reference question twice before its web
    step, until its time ran out."""
    if any(step.builds_on_earlier() for step in remaining):
        why = "a remaining step builds on an earlier answer"
    elif web_available and not searched_web and any(step.tool == "search_web" for step in remaining):
        # Findings from the documents cannot hold what the plan sends to the web (the reference question).
        why = "a remaining step searches the web, which no step has yet"
    else:
        return None
    return Fired("keep_going", f"{len(remaining)} step(s) left", "went on without asking the policy", why)
