"""The deep-thinking program: plan, then per step rewrite, supervise, recall, rerank, distill, reflect
and decide; finally a short answer from the question's own passages and every step's, and a cited answer
led by the sentence that states it, its citations checked.

Budgets (steps, LM calls, wall clock) end the loop early with an answer from what was found. A module
whose output cannot be parsed after one retry degrades to a safe fallback, and the trajectory says so.
"""

import copy
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any, Literal

import dspy

from dspy_rag.citations import (
    check_citations,
    citation_validity,
    number_passages,
    resolve,
    restates,
    sentences,
    supports,
    with_marker,
    word_overlap,
)
from dspy_rag.config import BudgetConfig, GuardConfig
from dspy_rag.optimizers.policy_features import live_point
from dspy_rag.pipelines.evidence import evidence_chars, final_evidence, question_passages
from dspy_rag.pipelines.guards import Fired, must_go_on, query_for, routed_to_web, without_steps_done
from dspy_rag.pipelines.learned_policy import LearnedPolicy
from dspy_rag.pipelines.lm_calls import BudgetExhausted, LMCalls
from dspy_rag.pipelines.short_answer import ShortAnswer, cited_lead
from dspy_rag.pipelines.step_answer import answer_in
from dspy_rag.pipelines.trajectory import Scored, StepRecord, Trajectory
from dspy_rag.reranker import Reranker
from dspy_rag.retrieval import Passage, Retriever, interleave
from dspy_rag.signatures import (
    ChooseStrategy,
    DecideNext,
    DistillPassages,
    PlanResearch,
    Reflect,
    RewriteQuery,
    Step,
)
from dspy_rag.web import WebSearch, WebSearchError

PolicyMode = Literal["llm", "plan", "learned"]
Events = Callable[[str, str], None]
MAX_SECTIONS_SHOWN = 40  # a corpus of many small documents has a title per passage: too many to plan with
EVIDENCE_PER_STEP = 2  # the passages a step's finding cites
SHARED_TOOLS = frozenset({"retriever", "reranker", "web", "on_event"})


def first_sentence(text: str) -> str:
    return text.strip().split(". ")[0].rstrip(".") + "." if text.strip() else ""


def cited_from(sentence: str, numbers: list[int], evidence: list[Passage]) -> str:
    """The sentence citing the first of the passages `numbers` that states it, or else the one sharing most of
    its words (the citation check still flags it; the label points at the likeliest source)."""
    closest = max(numbers, key=lambda n: word_overlap(sentence, evidence[n - 1].text) or 0.0)
    return with_marker(sentence, next((n for n in numbers if supports(sentence, evidence[n - 1])), closest))


def by_plan(steps_left: int) -> tuple[str, str]:
    return ("CONTINUE", "plan has steps left") if steps_left else ("FINISH", "plan done")


class DeepResearch(dspy.Module):
    def __init__(self, retriever: Retriever, reranker: Reranker | None = None, web: WebSearch | None = None,
                 top_n: int = 4, budgets: BudgetConfig | None = None, policy: PolicyMode = "llm",
                 on_event: Events = lambda kind, text: None, learned: LearnedPolicy | None = None,
                 evidence_chars: int = evidence_chars(4096), guards: GuardConfig | None = None) -> None:
        super().__init__()
        if policy == "learned" and learned is None:
            raise ValueError("policy 'learned' needs the LearnedPolicy to decide with")
        self.retriever = retriever
        self.reranker = reranker
        self.web = web
        self.top_n = top_n
        self.budgets = budgets or BudgetConfig()
        self.policy = policy
        self.on_event = on_event
        self.learned = learned
        self.evidence_chars = evidence_chars
        self.guards = guards or GuardConfig()
        self.artifact: str | None = None  # the compiled artifact whose prompts and demos it runs, if any
        self.plan = dspy.Predict(PlanResearch)
        self.rewrite = dspy.Predict(RewriteQuery)
        self.supervise = dspy.Predict(ChooseStrategy)
        self.distill = dspy.Predict(DistillPassages)
        self.reflect = dspy.Predict(Reflect)
        self.decide = dspy.Predict(DecideNext)
        self.short_answer = ShortAnswer()

    def __deepcopy__(self, memo: dict[int, Any]) -> "DeepResearch":
        """Optimizers copy programs to tune their prompts; the tools (index, reranker, web) are shared, not copied."""
        copied = self.__class__.__new__(self.__class__)
        memo[id(self)] = copied
        for name, value in self.__dict__.items():
            copied.__dict__[name] = value if name in SHARED_TOOLS else copy.deepcopy(value, memo)
        return copied

    def forward(self, question: str) -> dspy.Prediction:
        record = Trajectory(question, self.policy, self.reranker.name if self.reranker else "none",
                            self.web.name if self.web else "off")
        calls = LMCalls(self.budgets, record.calls)
        findings: list[str] = []
        floor, record.web_error = question_passages(question, self.retriever, self.reranker, self.web, self.top_n)
        record.floor = [Scored.of(p) for p in floor]
        self.on_event("sources", "for the question: " + self._sources(floor))
        read: list[list[Passage]] = []  # each step's reranked passages
        try:
            steps, answers = self._plan(question, findings, calls, record)
            while steps:
                if len(record.steps) >= self.budgets.max_steps:
                    raise BudgetExhausted(f"step budget ({self.budgets.max_steps}) reached, "
                                          f"{len(steps)} planned step(s) not done")
                planned = steps.pop(0)
                resolved = planned.resolved(answers)
                step_record, top = self._research(resolved, len(record.steps), findings, calls, record)
                if resolved != planned:
                    self._note(step_record.notes, f"planned as: {planned.sub_question}")
                record.steps.append(step_record)
                answers.append(answer_in(step_record.finding, step_record.sub_question))
                findings.append(step_record.finding)
                read.append(top)
                decided = self._decide(question, steps, findings, calls, record)
                step_record.decision, step_record.decision_reason = decided
                self.on_event("decision", f"{step_record.decision}: {step_record.decision_reason}")
                if step_record.decision == "FINISH":
                    break
                if step_record.decision == "REVISE":
                    steps, answers = self._plan(question, findings, calls, record)
        except BudgetExhausted as exc:
            record.stopped_early = str(exc)
            self.on_event("stop", f"stopped early: {exc}")
        return self.answer(question, findings, final_evidence(floor, read, self.evidence_chars), calls, record)

    def _plan(self, question: str, findings: list[str], calls: LMCalls, record: Trajectory
              ) -> tuple[list[Step], list[str | None]]:
        """The steps to research, and the answers of the plan's steps already done: what its "the answer of
        step N" stands for."""
        titles = self.retriever.index.section_titles
        one_step = [Step(sub_question=question, tool="search_docs", justification="fallback: the question as is")]
        planned = calls("plan", self.plan, lambda: dspy.Prediction(steps=one_step), question=question,
                           sections=titles if len(titles) <= MAX_SECTIONS_SHOWN else [],
                           web_available=self.web is not None, findings=findings)
        steps = [s for s in planned.steps if s.sub_question.strip()] or one_step
        if self.web is not None and self.guards.web_routing:
            steps, routed = routed_to_web(question, steps)
            for fired in routed:
                self._guarded(record, fired)
        record.plans.append([s.model_dump() for s in steps])
        verb = "plan" if len(record.plans) == 1 else "revised plan"
        self.on_event("plan", f"{verb}: " + " | ".join(f"{s.sub_question} ({s.tool})" for s in steps))
        if not self.guards.repeated_step:
            return steps, []
        steps, answers, skipped = without_steps_done(steps, record.steps)
        for fired in skipped:
            self._guarded(record, fired)
        return steps, answers

    def _note(self, notes: list[str], text: str) -> None:
        """Record what the program did other than the modules asked (a resolved step, a web fallback); show it."""
        notes.append(text)
        self.on_event("note", text)

    def _guarded(self, record: Trajectory, fired: Fired, step: int | None = None) -> None:
        """Write a guard's firing into the trajectory, and show it as it happens."""
        record.guards.append(asdict(replace(fired, step=step)))
        self.on_event("guard", f"{fired.guard}: {fired.changed} ({fired.why}); saw {fired.saw}")

    def _recall(self, step: Step, query: str, calls: LMCalls, record: StepRecord) -> list[Passage]:
        if step.tool == "search_web":
            if self.web is None:
                record.notes.append("web search is off; searched the documents instead")
            else:
                try:
                    return self.web.search(query, self.retriever.top_k)
                except WebSearchError as exc:
                    record.web_error = str(exc)
                    self.on_event("web", f"web search failed ({exc}); searching the documents instead")
        chosen = calls("supervise", self.supervise, lambda: dspy.Prediction(strategy="hybrid", reason="fallback"),
                          step=record.index, query=query)
        record.strategy, record.strategy_reason = chosen.strategy, chosen.reason
        self.on_event("strategy", f"{chosen.strategy} ({chosen.reason})")
        ranking = self.retriever.search(query, chosen.strategy)
        if not step.section:
            return ranking
        # A wrong section guess must not hide the answer: the section's ranking takes turns with the open one.
        return interleave([ranking, self.retriever.search(query, chosen.strategy, step.section)])[: self.retriever.top_k]

    def _research(self, step: Step, index: int, findings: list[str], calls: LMCalls, trajectory: Trajectory
                  ) -> tuple[StepRecord, list[Passage]]:
        record = StepRecord(index, step.sub_question, step.tool, step.keywords, step.section, step.justification)
        started = calls.elapsed
        self.on_event("step", f"step {index + 1}: {step.sub_question}")
        rewritten = calls("rewrite", self.rewrite, lambda: dspy.Prediction(query=step.sub_question), step=index,
                             sub_question=step.sub_question, keywords=step.keywords, findings=findings)
        record.query, fired = (query_for(rewritten.query, step.sub_question, findings) if self.guards.query_guard
                               else (" ".join(rewritten.query.split()) or step.sub_question, None))
        if fired:
            self._guarded(trajectory, fired, index)
        self.on_event("query", record.query)
        candidates = self._recall(step, record.query, calls, record)
        top = (self.reranker.rerank(record.query, candidates, self.top_n) if self.reranker and candidates
               else candidates[: self.top_n])
        record.retrieved, record.reranked = [Scored.of(p) for p in candidates], [Scored.of(p) for p in top]
        self.on_event("sources", self._sources(top))
        if not top:
            record.context, record.finding = "nothing found", f"Nothing was found for: {step.sub_question}"
            record.seconds = round(calls.elapsed - started, 3)
            return record, []
        distilled = calls("distill", self.distill, lambda: dspy.Prediction(
            context=" ".join(first_sentence(p.text) for p in top[:EVIDENCE_PER_STEP]), used_passages=[1, 2]),
            step=index, sub_question=step.sub_question, passages=number_passages(top))
        used = [top[n - 1] for n in dict.fromkeys(distilled.used_passages) if 1 <= n <= len(top)]
        used = used[:EVIDENCE_PER_STEP] or top[:1]
        record.context, record.used_passages = distilled.context, [p.id for p in used]
        self.on_event("context", distilled.context)
        reflected = calls("reflect", self.reflect, lambda: dspy.Prediction(finding=first_sentence(distilled.context)),
                             step=index, sub_question=step.sub_question, context=distilled.context)
        record.finding = reflected.finding
        self.on_event("finding", reflected.finding)
        record.seconds = round(calls.elapsed - started, 3)
        return record, top

    @staticmethod
    def _sources(passages: list[Passage]) -> str:
        return "; ".join(f"{p.section or p.source} ({p.score:.2f})" for p in passages) or "none"

    def _decide(self, question: str, remaining: list[Step], findings: list[str], calls: LMCalls,
                record: Trajectory) -> tuple[str, str]:
        if self.policy == "learned" and remaining and self.learned is not None:
            decision, probability = self.learned.decide(live_point(question, record, len(remaining)))
            record.steps[-1].finish_probability = round(probability, 4)
            return decision, f"learned: p(finish) {probability:.2f}, threshold {self.learned.threshold:.2f}"
        if self.policy != "llm":  # the plan policy, or the learned one with the plan done: it never revises
            return by_plan(len(remaining))
        searched_web = any(step.tool == "search_web" for step in record.steps)
        if self.guards.keep_going and (fired := must_go_on(remaining, searched_web, self.web is not None)):
            self._guarded(record, fired, record.steps[-1].index)
            return "CONTINUE", f"keep_going: {fired.why}"
        decision, reason = self.ask_policy(question, [s.sub_question for s in remaining], findings, calls)
        if decision == "CONTINUE" and not remaining:
            return "FINISH", f"{reason} (no steps left)"
        return decision, reason

    def ask_policy(self, question: str, remaining: list[str], findings: list[str], calls: LMCalls) -> tuple[str, str]:
        """The policy LM's decision and reason; the plan's when its output never parses."""
        planned, why = by_plan(len(remaining))
        fallback = dspy.Prediction(decision=planned, reason=f"fallback: {why}")
        decided = calls("policy", self.decide, lambda: fallback, question=question, remaining_steps=remaining,
                        findings=findings)
        return decided.decision, decided.reason

    def answer(self, question: str, findings: list[str], evidence: list[Passage], calls: LMCalls,
               record: Trajectory) -> dspy.Prediction:
        """The short answer from the evidence, led by the evidence sentence that states it, then, after several
        steps, each step's finding cited; also what stopping earlier would have given. The findings stay out of
        the short answer's prompt: a small model's paraphrase that names the wrong figure outvotes the passages."""
        if not evidence:
            draft, citations, checks = "The research found no passage that answers the question.", [], []
            answer, short = draft, ""
        else:
            fallback = dspy.Prediction(short_answer=answer_in(findings[-1], question) or "" if findings else "")
            short = calls("answer", self.short_answer, lambda: fallback, final=True, question=question,
                          passages=number_passages(evidence)).short_answer
            draft = cited_lead(short, question, evidence)
            if len(record.steps) > 1:  # one step's finding says what the lead says, in a small model's words
                draft = self._with_findings(draft, evidence, record)
            answer, citations = resolve(draft, evidence)
            checks = check_citations(draft, evidence)
        record.answer, record.short_answer, record.citations = answer, short, [vars(c) for c in citations]
        record.flagged = [{"sentence": c.sentence, "reason": c.reason} for c in checks if c.reason]
        record.citation_validity = citation_validity(checks)
        record.seconds = round(calls.elapsed, 3)
        return dspy.Prediction(answer=answer, short_answer=short, draft=draft, citations=citations,
                               flagged=record.flagged, passages=evidence, findings=findings, trajectory=record)

    @staticmethod
    def _with_findings(lead: str, evidence: list[Passage], record: Trajectory) -> str:
        """The lead, then each step's finding that it does not restate, cited by the step's passage that states
        it (or the one sharing most of its words, which the citation check then flags)."""
        number = {p.id: n for n, p in enumerate(evidence, start=1)}
        out = [lead]
        for step in record.steps:
            own = [number[p] for p in step.used_passages if p in number]
            if own and not restates(step.finding, lead):
                out += [cited_from(sentence, own, evidence) for sentence in sentences(step.finding)]
        return " ".join(out)
