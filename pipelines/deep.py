"""The deep-thinking program: plan, then per step rewrite, supervise, recall, rerank, distill, reflect and decide;
finally a short answer from the question's own passages and every step's, and a cited answer led by the sentence
that states it, its citations checked.

Each role is a module of its own (planner, step researcher, policy, synthesizer) that owns its predictors and
the guards that check it; `forward` composes them. With a served model, the plan's steps that build on no earlier
answer are researched at once, and the policy decides after each such batch (pipelines/step_batch.py). Budgets
(steps, LM calls, wall clock) end the loop early with an answer from what was found. A module whose output cannot
be parsed after one retry degrades to a safe fallback, and the trajectory says so.
"""

from functools import partial

import dspy

from dspy_rag.config import BudgetConfig, GuardConfig, RoleConfig, TierConfig
from dspy_rag.pipelines.conflict_note import ConflictGuard, document_kinds
from dspy_rag.pipelines.evidence import evidence_chars, final_evidence, question_passages
from dspy_rag.pipelines.learned_policy import LearnedPolicy
from dspy_rag.pipelines.lm_calls import BudgetExhausted, LMCalls
from dspy_rag.pipelines.planner import Planner, planning_on
from dspy_rag.pipelines.policy import PolicyMode, ResearchPolicy
from dspy_rag.pipelines.research_run import Events, ResearchRun, SharesTools
from dspy_rag.pipelines.router import Router, coverage
from dspy_rag.pipelines.step_answer import answer_in
from dspy_rag.pipelines.step_batch import batch_size, researched_at_once
from dspy_rag.pipelines.step_researcher import StepResearcher, sources
from dspy_rag.pipelines.synthesizer import Synthesizer
from dspy_rag.pipelines.trajectory import Scored, StepRecord, Trajectory
from dspy_rag.reranker import Reranker
from dspy_rag.retrieval import Passage, Retriever
from dspy_rag.signatures import Step
from dspy_rag.web import WebSearch

BATCHED = "researched at once with the next step; the policy decides after the batch"


class DeepResearch(SharesTools, dspy.Module):
    SHARED_TOOLS = SharesTools.SHARED_TOOLS | {"planner_lm"}

    def __init__(self, retriever: Retriever, reranker: Reranker | None = None, web: WebSearch | None = None,
                 top_n: int = 4, budgets: BudgetConfig | None = None, policy: PolicyMode = "llm",
                 on_event: Events = lambda kind, text: None, learned: LearnedPolicy | None = None,
                 evidence_chars: int = evidence_chars(4096), guards: GuardConfig | None = None,
                 roles: RoleConfig | None = None, tiers: TierConfig | None = None, parallel_steps: int = 1,
                 planner_lm: dspy.LM | None = None) -> None:
        """`parallel_steps`: independent plan steps researched at once (a served model takes them); 1: one by one.
        `planner_lm`: the model the planner calls, when not the configured one."""
        super().__init__()
        guards, roles = guards or GuardConfig(), roles or RoleConfig()
        self.retriever = retriever
        self.reranker = reranker
        self.web = web
        self.top_n = top_n
        self.budgets = budgets or BudgetConfig()
        self.on_event = on_event
        self.evidence_chars = evidence_chars
        self.parallel_steps = parallel_steps
        self.planner_lm = planner_lm
        self.injection_guard = guards.injection
        self.artifact: str | None = None  # the compiled artifact whose prompts and demos it runs, if any
        self.planner = Planner(guards)
        chooser = learned.strategy if policy == "learned" and learned is not None else None
        self.researcher = StepResearcher(retriever, reranker, web, top_n, guards, roles, chooser)
        self.policy = ResearchPolicy(policy, learned, guards.keep_going)
        self.synthesizer = Synthesizer(ConflictGuard(tiers or TierConfig(), guards.conflicts), roles.repair)
        self.router = Router(roles.router, guards.route_check)

    def forward(self, question: str) -> dspy.Prediction:
        record = Trajectory(question, self.policy.mode, self.reranker.name if self.reranker else "none",
                            self.web.name if self.web else "off")
        record.parallel_steps = self.parallel_steps
        run = ResearchRun(record, LMCalls(self.budgets, record.calls), self.on_event)
        floor, record.web_error, fired = question_passages(question, self.retriever, self.reranker, self.web,
                                                           self.top_n, self.injection_guard)
        for each in fired:
            run.guarded(each)
        record.floor = [Scored.of(p) for p in floor]
        run.event("sources", "for the question: " + sources(floor))
        findings: list[str] = []
        if self.router.enabled and (routed := self.route(question, floor, run)).answer is not None:
            return self.synthesizer.stated(routed.answer, routed.short_answer, findings, run)
        read: list[list[Passage]] = []  # each step's reranked passages
        try:
            plan = self.plan(question, findings, run)
            steps, answers = plan.steps, plan.answers
            while steps:
                room = self.budgets.max_steps - len(record.steps)
                if room <= 0:
                    raise BudgetExhausted(f"step budget ({self.budgets.max_steps}) reached, "
                                          f"{len(steps)} planned step(s) not done")
                batch = steps[: batch_size(steps, min(self.parallel_steps, room))]
                del steps[: len(batch)]
                done, stopped = researched_at_once(partial(self.research, batch, answers, findings), len(batch), run)
                for step, top in done:
                    record.steps.append(step)
                    answers.append(answer_in(step.finding, step.sub_question))
                    findings.append(step.finding)
                    read.append(top)
                for step, _ in done[:-1] if stopped is None else done:  # no decision was asked in between
                    step.decision, step.decision_reason = "CONTINUE", BATCHED
                if stopped is not None:
                    raise stopped
                step = record.steps[-1]
                step.decision, step.decision_reason = self.policy(question=question, remaining=steps,
                                                                  findings=findings, web_available=self.web is not None,
                                                                  run=run)
                run.event("decision", f"{step.decision}: {step.decision_reason}")
                if step.decision == "FINISH":
                    break
                if step.decision == "REVISE":
                    plan = self.plan(question, findings, run)
                    steps, answers = plan.steps, plan.answers
        except BudgetExhausted as exc:
            record.stopped_early = str(exc)
            run.event("stop", f"stopped early: {exc}")
        return self.synthesizer(question=question, findings=findings,
                                evidence=final_evidence(floor, read, self.evidence_chars), run=run,
                                kinds=document_kinds(self.retriever.index))

    def research(self, batch: list[Step], answers: list[str | None], findings: list[str], position: int,
                 run: ResearchRun) -> tuple[StepRecord, list[Passage]]:
        """The batch's step at `position`, its references to earlier answers resolved, researched: its record and
        reranked passages."""
        planned = batch[position]
        resolved = planned.resolved(answers)
        step, top = self.researcher(step=resolved, index=len(run.trajectory.steps) + position, findings=findings,
                                    run=run)
        if resolved != planned:
            run.note(step.notes, f"planned as: {planned.sub_question}")
        return step, top

    def route(self, question: str, floor: list[Passage], run: ResearchRun) -> dspy.Prediction:
        index = self.retriever.index
        return self.router(question=question, covered=coverage(list(index.sources), index.section_titles),
                           web_available=self.web is not None, floor=floor, reranked=self.reranker is not None,
                           run=run)

    def plan(self, question: str, findings: list[str], run: ResearchRun) -> dspy.Prediction:
        with planning_on(self.planner_lm):
            return self.planner(question=question, sections=self.retriever.index.section_titles,
                                web_available=self.web is not None, findings=findings, run=run)
