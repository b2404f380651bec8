"""The learned research policy: logistic regressions over the research features that replace the policy LM call,
stored in an artifact as `policy.json` (feature names, and per decision its standardisation, coefficients,
intercept and threshold, how it was trained; plain JSON, never a pickle).

Two decisions are learned, each where traced runs could label it: `finish`, while the plan has steps left
(FINISH or CONTINUE), and `revise`, once the first plan is done (REVISE once, or FINISH). A policy may hold
either or both; where it holds none, the research follows the plan. It may also hold a `strategy` chooser, which
picks each documents step's search in place of the retrieval supervisor's LM call (strategy_chooser.py).
"""

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dspy_rag.artifacts import read_plain
from dspy_rag.errors import UserError
from dspy_rag.files import write_json_atomic
from dspy_rag.pipelines.policy_features import (
    FEATURES,
    DecisionPoint,
    Embed,
    embed_texts,
    feature_values,
    finite_numbers,
    vector,
)
from dspy_rag.pipelines.strategy_chooser import StrategyChooser

POLICY_FILE = "policy.json"
FORMAT = "dspy-rag-policy"
POLICY_VERSION = 3  # 1: the finish classifier's numbers at the top level, no revise classifier; 2: no strategy
PARAMETERS = ("means", "scales", "coefficients")  # one number per feature each
DECISIONS = ("finish", "revise")


@dataclass
class Classifier:
    """A standardised logistic regression: the probability that its decision (FINISH, REVISE) is right, and the
    threshold at which it is taken."""

    means: list[float]
    scales: list[float]
    coefficients: list[float]
    intercept: float
    threshold: float

    def probability(self, values: list[float]) -> float:
        """For feature values in FEATURES order."""
        z = self.intercept + sum(c * (v - m) / s for c, v, m, s in
                                 zip(self.coefficients, values, self.means, self.scales, strict=True))
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    @classmethod
    def from_json(cls, raw: Any, path: Path) -> "Classifier":
        """One decision's numbers; refuses any that do not fit the features or are not finite."""
        fixing = "run `dspy-rag distill-policy` again"
        if not isinstance(raw, dict):
            raise UserError(f"{path} is corrupt (a classifier is not an object); {fixing}")
        if not (all(finite_numbers(raw.get(name), len(FEATURES)) for name in PARAMETERS)
                and finite_numbers([raw.get("intercept"), raw.get("threshold")], 2)):
            raise UserError(f"{path} is corrupt (its coefficients do not fit its features); {fixing}")
        if any(s <= 0 for s in raw["scales"]):
            raise UserError(f"{path} is corrupt (a feature scale is not positive); {fixing}")
        return cls(**{name: raw[name] for name in cls.__dataclass_fields__})


@dataclass
class LearnedPolicy:
    features: list[str]
    finish: Classifier | None = None  # while the plan has steps left: FINISH (yes) or CONTINUE
    revise: Classifier | None = None  # when the first plan is done: REVISE (yes) or FINISH
    strategy: StrategyChooser | None = None  # a documents step's search
    summary: dict[str, Any] = field(default_factory=dict)
    format: str = FORMAT
    version: int = POLICY_VERSION

    def decide(self, point: DecisionPoint, embed: Embed = embed_texts) -> tuple[str, float | None, str]:
        """The decision at a decision point, its classifier's probability (None: the plan's decision, where no
        classifier covers the point) and why."""
        if point.steps_left:
            if self.finish is None:
                return "CONTINUE", None, "learned: no finish classifier, the plan has steps left"
            probability = self.finish.probability(vector(feature_values(point, embed)))
            decision = "FINISH" if probability >= self.finish.threshold else "CONTINUE"
            return decision, probability, f"learned: p(finish) {probability:.2f}, threshold {self.finish.threshold:.2f}"
        if self.revise is None or point.revisions:
            return "FINISH", None, "learned: plan done"
        probability = self.revise.probability(vector(feature_values(point, embed)))
        decision = "REVISE" if probability >= self.revise.threshold else "FINISH"
        return decision, probability, (f"learned: plan done, p(revise) {probability:.2f}, "
                                       f"threshold {self.revise.threshold:.2f}")

    def describe(self) -> str:
        """Which decisions it learned, at which thresholds."""
        parts = [f"{name} at {c.threshold:.2f}" for name in DECISIONS if (c := getattr(self, name)) is not None]
        parts += [self.strategy.describe()] if self.strategy is not None else []
        return f"learned policy from {self.summary.get('trainset', '?')} ({', '.join(parts)})"

    def save(self, folder: Path) -> Path:
        """Write `policy.json` into the artifact folder atomically; returns its path."""
        path = folder / POLICY_FILE
        write_json_atomic(path, asdict(self))
        return path

    @classmethod
    def load(cls, folder: Path) -> "LearnedPolicy":
        """The artifact's policy; refuses one that is missing, corrupt, newer, or made for other features."""
        path = folder / POLICY_FILE
        try:
            raw = json.loads(read_plain(path).decode("utf-8"))
        except FileNotFoundError:
            raise UserError(f"artifact {folder.name} has no learned policy ({POLICY_FILE}); run `dspy-rag "
                            f"distill-policy --trainset NAME --artifact {folder.name}` first, or use --policy llm"
                            ) from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UserError(f"{path} is corrupt ({type(exc).__name__}); run `dspy-rag distill-policy` again") from exc
        return cls.from_json(raw, path)

    @classmethod
    def from_json(cls, raw: Any, path: Path) -> "LearnedPolicy":
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            raise UserError(f"{path} is not a dspy-rag policy; run `dspy-rag distill-policy` again")
        version = raw.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise UserError(f"{path} is corrupt (version {version!r:.20} is no policy version); run `dspy-rag "
                            "distill-policy` again")
        if version > POLICY_VERSION:
            raise UserError(f"{path} was written by a newer dspy-rag (policy version {version}, this one "
                            f"reads up to {POLICY_VERSION}); upgrade dspy-rag")
        if raw.get("features") != list(FEATURES):
            raise UserError(f"{path} was distilled for other features than this program computes "
                            f"({mismatch(raw.get('features'))}); run `dspy-rag distill-policy` again")
        parts = ({"finish": raw, "revise": None} if version == 1
                 else {name: raw.get(name) for name in DECISIONS})
        classifiers = {name: None if part is None else Classifier.from_json(part, path) for name, part in parts.items()}
        strategy = None if raw.get("strategy") is None else StrategyChooser.from_json(raw["strategy"], path)
        if all(c is None for c in classifiers.values()) and strategy is None:
            raise UserError(f"{path} is corrupt (it holds no classifier); run `dspy-rag distill-policy` again")
        summary = raw.get("summary")
        return cls(list(FEATURES), **classifiers, strategy=strategy, summary=summary if isinstance(summary, dict) else {})


def mismatch(names: Any) -> str:
    """What a stored feature list lacks and has beyond this program's, in a few words."""
    if not isinstance(names, list):
        return "no feature list"
    missing = [n for n in FEATURES if n not in names]
    unknown = [n for n in names if n not in FEATURES]
    parts = [f"lacks {', '.join(missing)}" if missing else "", f"has unknown {', '.join(map(str, unknown))}"
             if unknown else ""]
    return "; ".join(p for p in parts if p) or "same features in another order"
