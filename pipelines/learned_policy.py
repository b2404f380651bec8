"""The learned stopping policy: a logistic regression over the research features that replaces the policy LM
call, stored in an artifact as `policy.json` (feature names, standardisation, coefficients, intercept, decision
threshold, how it was trained; plain JSON, never a pickle).

It chooses between CONTINUE and FINISH only. REVISE is not learned: labelling it honestly would take a
re-planned run from every decision point, so the learned policy follows the plan it has (`distill_policy`).
"""

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dspy_rag.artifacts import read_plain
from dspy_rag.errors import UserError
from dspy_rag.files import write_json_atomic
from dspy_rag.pipelines.policy_features import FEATURES, DecisionPoint, Embed, embed_texts, feature_values, vector

POLICY_FILE = "policy.json"
FORMAT = "dspy-rag-policy"
POLICY_VERSION = 1
PARAMETERS = ("means", "scales", "coefficients")  # one number per feature each


@dataclass
class LearnedPolicy:
    features: list[str]
    means: list[float]
    scales: list[float]
    coefficients: list[float]
    intercept: float
    threshold: float  # FINISH when the probability that finishing is right reaches it
    summary: dict[str, Any] = field(default_factory=dict)
    format: str = FORMAT
    version: int = POLICY_VERSION

    def probability(self, values: list[float]) -> float:
        """The probability that finishing is right, for feature values in FEATURES order."""
        z = self.intercept + sum(c * (v - m) / s for c, v, m, s in
                                 zip(self.coefficients, values, self.means, self.scales, strict=True))
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    def decide(self, point: DecisionPoint, embed: Embed = embed_texts) -> tuple[str, float]:
        """FINISH or CONTINUE at a decision point, with the probability that finishing is right."""
        probability = self.probability(vector(feature_values(point, embed)))
        return ("FINISH" if probability >= self.threshold else "CONTINUE"), probability

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
        if not isinstance(raw.get("version"), int) or raw["version"] > POLICY_VERSION:
            raise UserError(f"{path} was written by a newer dspy-rag (policy version {raw.get('version')}, this one "
                            f"reads up to {POLICY_VERSION}); upgrade dspy-rag")
        if raw.get("features") != list(FEATURES):
            raise UserError(f"{path} was distilled for other features than this program computes "
                            f"({mismatch(raw.get('features'))}); run `dspy-rag distill-policy` again")
        numbers = [*(x for name in PARAMETERS for x in raw.get(name) or []), raw.get("intercept"), raw.get("threshold")]
        lengths = {len(raw.get(name) or []) for name in PARAMETERS}
        if lengths != {len(FEATURES)} or not all(isinstance(x, int | float) and math.isfinite(x) for x in numbers):
            raise UserError(f"{path} is corrupt (its coefficients do not fit its features); run `dspy-rag "
                            "distill-policy` again")
        if any(s <= 0 for s in raw["scales"]):
            raise UserError(f"{path} is corrupt (a feature scale is not positive); run `dspy-rag distill-policy` again")
        return cls(**{name: raw[name] for name in cls.__dataclass_fields__ if name in raw})


def mismatch(names: Any) -> str:
    """What a stored feature list lacks and has beyond this program's, in a few words."""
    if not isinstance(names, list):
        return "no feature list"
    missing = [n for n in FEATURES if n not in names]
    unknown = [n for n in names if n not in FEATURES]
    parts = [f"lacks {', '.join(missing)}" if missing else "", f"has unknown {', '.join(map(str, unknown))}"
             if unknown else ""]
    return "; ".join(p for p in parts if p) or "same features in another order"
