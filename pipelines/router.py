"""The router role: whether a question is researched, answered from general knowledge, asked back for what it
leaves out, or declined with what the documents cover; checked by the route_check guard."""

from pathlib import PurePath

import dspy

from dspy_rag.pipelines.guards import Fired
from dspy_rag.pipelines.research_run import ResearchRun
from dspy_rag.retrieval import Passage
from dspy_rag.signatures import AnswerGenerally, RouteQuestion

MAX_TITLES_SHOWN = 30  # enough to say what a filing covers; a corpus of many small documents is named by its sources
MAX_SOURCES_SHOWN = 10
RELEVANT_SCORE = 0.0  # a reranker logit above this judges the passage more likely relevant to the question than not
GENERAL_NOTE = "(from general knowledge, not from the documents)"


def coverage(sources: list[str], titles: list[str]) -> str:
    """What the documents cover, in one line: their file names (or URLs) and, when few, their section titles."""
    names = [PurePath(s).name or s for s in sources[:MAX_SOURCES_SHOWN]]
    more = f" and {len(sources) - MAX_SOURCES_SHOWN} more" if len(sources) > MAX_SOURCES_SHOWN else ""
    shown = f"; sections: {'; '.join(titles)}" if len(titles) <= MAX_TITLES_SHOWN else ""
    return f"{', '.join(names)}{more}{shown}" if names else "no documents"


def route_check(route: str, floor: list[Passage], reranked: bool) -> Fired | None:
    """The guard over a declined question: research it anyway when the reranker judges one of the question's own
    passages relevant (the documents do speak to it); None when the route stands."""
    if route not in ("general", "out_of_scope") or not reranked or not floor:
        return None
    best = max(floor, key=lambda p: p.score)
    if best.score <= RELEVANT_SCORE:
        return None
    return Fired("route_check", f"route {route}", "route research",
                 f"the reranker scores [{best.section}] {best.score:.1f}, relevant to the question")


class Router(dspy.Module):
    """Routes the question; a general one is answered in a second short call, without retrieval. Switched off
    (`roles.router: false`, the default) every question is researched, with no LM call."""

    def __init__(self, enabled: bool = False, check: bool = True) -> None:
        super().__init__()
        self.enabled = enabled
        self.check = check
        self.route = dspy.Predict(RouteQuestion)
        self.general = dspy.Predict(AnswerGenerally)

    def forward(self, question: str, covered: str, web_available: bool, floor: list[Passage], reranked: bool,
                run: ResearchRun) -> dspy.Prediction:
        """The route and its reason, and for a question not researched, the answer to give instead."""
        record = run.trajectory
        routed = run.calls("route", self.route, lambda: dspy.Prediction(
            route="research", reason="fallback: the router's output did not parse"), question=question,
            coverage=covered, web_available=web_available)
        route, reason = routed.route, routed.reason
        if self.check and (fired := route_check(route, floor, reranked)) is not None:
            run.guarded(fired)
            route, reason = "research", fired.why
        record.route, record.route_reason = route, reason
        run.event("route", f"{route}: {reason}")
        if route == "research":
            return dspy.Prediction(route=route, answer=None, short_answer="")
        if route == "general":
            answered = run.calls("general", self.general, lambda: dspy.Prediction(answer=""), final=True,
                                 question=question).answer.strip()
            answer = f"{answered} {GENERAL_NOTE}" if answered else f"No answer came back {GENERAL_NOTE}."
            return dspy.Prediction(route=route, answer=answer, short_answer=answered)
        if route == "needs_more_info":
            return dspy.Prediction(route=route, answer=f"The question needs more to go on: {reason}", short_answer="")
        return dspy.Prediction(route=route, short_answer="",
                               answer=f"The documents do not cover this ({reason}). They cover: {covered}.")
