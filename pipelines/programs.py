"""Build a program by name over an index and web tool, as `ask`, `compile` and the benchmarks need it, with its
compiled artifact loaded (`program_for`)."""

from collections.abc import Callable
from pathlib import Path
from typing import Literal

import dspy

from dspy_rag import artifacts
from dspy_rag.config import Config
from dspy_rag.errors import UserError
from dspy_rag.index import Index
from dspy_rag.models import planner_lm, served
from dspy_rag.pipelines.baseline import BaselineRAG
from dspy_rag.pipelines.conflict_note import ConflictGuard
from dspy_rag.pipelines.deep import DeepResearch
from dspy_rag.pipelines.evidence import evidence_chars
from dspy_rag.pipelines.learned_policy import POLICY_FILE, LearnedPolicy
from dspy_rag.pipelines.plain import PlainRAG
from dspy_rag.pipelines.policy import PolicyMode
from dspy_rag.reranker import load_reranker
from dspy_rag.retrieval import Retriever
from dspy_rag.web import WebSearch

Pipeline = Literal["deep", "baseline", "plain"]
PolicyChoice = Literal["auto", "llm", "plan", "learned"]  # a PolicyMode, or auto: the artifact's learned one if any


def build_program(pipeline: Pipeline, settings: Config, index: Index, web: WebSearch | None,
                  policy: PolicyMode = "llm", on_event: Callable[[str, str], None] = lambda kind, text: None,
                  learned: LearnedPolicy | None = None) -> dspy.Module:
    retriever = Retriever(index, settings.retrieval.top_k, settings.retrieval.rrf_k)
    if pipeline == "plain":
        return PlainRAG(retriever)
    if pipeline == "baseline":
        return BaselineRAG(retriever, settings.retrieval.top_n, web, load_reranker(settings), settings.guards.injection,
                           ConflictGuard(settings.tiers, settings.guards.conflicts))
    return DeepResearch(retriever, load_reranker(settings), web, settings.retrieval.top_n, settings.budgets,
                        policy, on_event=on_event, learned=learned,
                        evidence_chars=evidence_chars(settings.lm.context_window), guards=settings.guards,
                        roles=settings.roles, tiers=settings.tiers,
                        parallel_steps=settings.lm.parallel_steps if served(settings.lm.model) else 1,
                        planner_lm=planner_lm(settings.lm))


def policy_of(choice: PolicyChoice, chosen: Path | None) -> PolicyMode:
    """The policy a deep program decides with: `auto` is the learned one where the chosen artifact carries a
    `policy.json`, else the LM's; any other choice is itself."""
    if choice == "auto":
        return "learned" if chosen is not None and (chosen / POLICY_FILE).is_file() else "llm"
    return choice


def program_for(pipeline: str, settings: Config, store: Index, searcher: WebSearch | None,
                policy: PolicyChoice = "llm", say: Callable[..., None] = lambda *_: None,
                artifact: str | None = None) -> dspy.Module:
    """The program, with the compiled artifact loaded into the deep one (`auto`: the default shipped for the model),
    and the artifact's learned policy when it decides with one (`policy` learned, or auto and it has one)."""
    chosen = artifacts.chosen(artifact or settings.artifacts.default, settings.artifacts.path, settings.lm.model)
    mode = policy_of(policy, chosen)
    learned = None
    if pipeline == "deep" and mode == "learned":
        if chosen is None:
            raise UserError("--policy learned decides with an artifact's policy.json; pass --artifact NAME (run "
                            "`dspy-rag distill-policy` for it first)")
        try:  # before the program is built: a policy it cannot run fails first
            learned = LearnedPolicy.load(chosen)
        except UserError as error:
            if policy != "auto":
                raise
            raise UserError(f"{error}; or pass --policy llm to decide without it") from error
    if pipeline == "deep" and (planner := settings.lm.separate_planner):
        say(f"the planner plans with {planner}")  # a local planner model's weights load now
    program = build_program(pipeline, settings, store, searcher, mode,
                            on_event=lambda kind, text: say(text, kind), learned=learned)
    if pipeline != "deep" or chosen is None:
        return program
    manifest = artifacts.load(chosen, program)
    program.artifact = manifest.name
    away = "" if manifest.model == settings.lm.model else f", compiled for {manifest.model}: prompts transfer as text"
    say(f"artifact {manifest.name} ({manifest.optimizer} on {manifest.trainset}{away})")
    if learned is not None:
        say(learned.describe())
    return program
