"""The trajectory record: everything one run did, as versioned JSON.

Compile and policy learning train on these records, so fields are only ever added; a change that
renames or drops one bumps TRAJECTORY_VERSION.
"""

from dataclasses import asdict, dataclass, field
from typing import Any

from dspy_rag.retrieval import Passage

TRAJECTORY_VERSION = 2  # 2: the question's passages (floor), their web error, guard firings; no `attributed`


@dataclass
class CallRecord:
    """One module's LM request(s): a retry after unparseable output counts as a second attempt."""

    module: str
    step: int | None
    seconds: float
    attempts: int
    prompt_tokens: int
    completion_tokens: int
    degraded: bool


@dataclass
class Scored:
    id: str
    source: str
    section: str
    score: float

    @classmethod
    def of(cls, passage: Passage) -> "Scored":
        return cls(passage.id, passage.source, passage.section, round(passage.score, 6))


@dataclass
class StepRecord:
    index: int
    sub_question: str
    tool: str
    keywords: list[str]
    section: str | None
    justification: str
    query: str = ""
    strategy: str | None = None
    strategy_reason: str = ""
    retrieved: list[Scored] = field(default_factory=list)
    reranked: list[Scored] = field(default_factory=list)
    context: str = ""
    used_passages: list[str] = field(default_factory=list)
    finding: str = ""
    decision: str = ""
    decision_reason: str = ""
    finish_probability: float | None = None  # the learned policy's, when it decided with the plan unfinished
    revise_probability: float | None = None  # the learned policy's, when it decided at the plan's end
    web_error: str | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class RepairRecord:
    """The repair pass over the answer's unsupported sentences: those flagged, what repair wrote for each (empty:
    dropped), the sentences the citation check flagged in the repaired answer, whether it was kept, and why."""

    flagged: list[str]
    rewrites: list[str] = field(default_factory=list)
    flagged_after: list[str] = field(default_factory=list)
    kept: bool = False
    why: str = ""


@dataclass
class Trajectory:
    question: str
    policy: str
    reranker: str
    web: str
    plans: list[list[dict[str, Any]]] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    answer: str = ""
    short_answer: str = ""  # added fields keep the version: readers of version 1 ignore what they do not know
    citations: list[dict[str, str]] = field(default_factory=list)
    flagged: list[dict[str, Any]] = field(default_factory=list)
    citation_validity: float | None = None
    stopped_early: str | None = None
    notes: list[str] = field(default_factory=list)  # what the program did beside its modules
    floor: list[Scored] = field(default_factory=list)  # the question's own reranked passages, the baseline's evidence
    guards: list[dict[str, Any]] = field(default_factory=list)  # each guard firing: guard, saw, changed, why, step
    web_error: str | None = None  # the web search of the question itself failed
    route: str = "research"  # the router's decision (pipelines/router.py); research when it is off
    route_reason: str = ""
    conflicts: list[dict[str, Any]] = field(default_factory=list)  # values the evidence disagrees on, cited
    single_source: dict[str, str] | None = None  # web on: the short answer, when one source alone states it
    repair: RepairRecord | None = None  # roles.repair on and a sentence flagged: what the repair pass did
    parallel_steps: int = 1  # independent steps researched at once (a served model); 1: one at a time
    seconds: float = 0.0

    @property
    def degraded(self) -> list[str]:
        """The modules whose output never parsed and fell back, e.g. 'plan' or 'distill (step 1)'."""
        return [c.module if c.step is None else f"{c.module} (step {c.step})" for c in self.calls if c.degraded]

    @property
    def lm_calls(self) -> int:
        return sum(c.attempts for c in self.calls)

    @property
    def tokens(self) -> int:
        return sum(c.prompt_tokens + c.completion_tokens for c in self.calls)

    @property
    def lm_seconds(self) -> float:
        return sum(c.seconds for c in self.calls)

    def to_json(self) -> dict[str, Any]:
        return {"version": TRAJECTORY_VERSION, **asdict(self), "degraded": self.degraded, "lm_calls": self.lm_calls,
                "tokens": self.tokens, "lm_seconds": round(self.lm_seconds, 3)}
