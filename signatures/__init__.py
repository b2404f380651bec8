"""Typed DSPy signatures, one role each; each docstring is that role's starting instruction."""

from dspy_rag.signatures.distiller import DistillPassages
from dspy_rag.signatures.planner import PlanResearch, Step
from dspy_rag.signatures.policy import DecideNext, Decision
from dspy_rag.signatures.query_rewriter import RewriteQuery
from dspy_rag.signatures.reflection import Reflect
from dspy_rag.signatures.repair import RepairAnswer
from dspy_rag.signatures.retrieval_supervisor import ChooseStrategy
from dspy_rag.signatures.router import AnswerGenerally, Route, RouteQuestion
from dspy_rag.signatures.short_answer import AnswerBriefly

__all__ = ["AnswerBriefly", "AnswerGenerally", "ChooseStrategy", "DecideNext", "Decision", "DistillPassages",
           "PlanResearch", "Reflect", "RepairAnswer", "RewriteQuery", "Route", "RouteQuestion", "Step"]
