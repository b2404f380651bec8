"""The learned search strategy: which search (vector, keyword or hybrid) a documents step runs, chosen from its
query's features by regressions that replace the retrieval supervisor's LM call under the learned policy.

Per strategy a standardised ridge regression predicts the evidence recall its passages give the query, learned
by `distill-policy` from traced steps searched every way (`policy_labels.SearchedStep`); the strategy predicted
highest is searched. Plain JSON inside `policy.json`, never a pickle.
"""

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, get_args

from dspy_rag.errors import UserError
from dspy_rag.pipelines.policy_features import finite_numbers, is_figure, is_name, words
from dspy_rag.retrieval import Strategy

STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)
QUERY_FEATURES: tuple[str, ...] = (
    "query_words",  # words in the query
    "names",        # capitalised words after the first
    "figures",      # words with a digit
    "quoted",       # the query quotes a phrase
    "yes_no",       # the query asks yes or no (it opens with an auxiliary verb)
    "section",      # the step names a section of the documents
)
AUXILIARIES = frozenset({"is", "are", "was", "were", "do", "does", "did", "can", "could", "has", "have", "had",
                         "will", "would", "should"})


def query_features(query: str, section: str | None) -> list[float]:
    """The QUERY_FEATURES of a step's query, in order."""
    said = words(query)
    return [float(len(said)),
            float(sum(is_name(n, w) for n, w in enumerate(said))),
            float(sum(map(is_figure, said))),
            float('"' in query or "\u201c" in query),
            float(bool(said) and said[0].lower() in AUXILIARIES),
            float(bool(section))]


@dataclass
class StrategyChooser:
    """Per strategy, a regression of the evidence recall its passages give, over standardised QUERY_FEATURES."""

    strategies: list[Strategy]  # best mean recall on the traced steps first: a tie goes to the earlier
    features: list[str]
    means: list[float]
    scales: list[float]
    coefficients: list[list[float]]  # per strategy, one per feature
    intercepts: list[float]  # per strategy

    def predicted(self, values: list[float]) -> dict[str, float]:
        """Each strategy's predicted recall for feature values in QUERY_FEATURES order."""
        standard = [(v - m) / s for v, m, s in zip(values, self.means, self.scales, strict=True)]
        return {name: intercept + sum(c * x for c, x in zip(coefficients, standard, strict=True))
                for name, coefficients, intercept in zip(self.strategies, self.coefficients, self.intercepts,
                                                         strict=True)}

    def best(self, values: list[float]) -> Strategy:
        """The strategy predicted highest for feature values in QUERY_FEATURES order."""
        return max(self.strategies, key=self.predicted(values).__getitem__)

    def choose(self, query: str, section: str | None) -> tuple[Strategy, str]:
        """The strategy to search with, and why."""
        predicted = self.predicted(query_features(query, section))
        return max(self.strategies, key=predicted.__getitem__), "learned: predicted evidence recall " + ", ".join(
            f"{name} {predicted[name]:.2f}" for name in self.strategies)

    def describe(self) -> str:
        """The chooser in a few words, for `describe` of the policy that holds it."""
        return f"strategy ({'/'.join(self.strategies)})"

    @classmethod
    def from_json(cls, raw: Any, path: Path) -> "StrategyChooser":
        """The chooser's numbers; refuses any that do not fit the strategies and features or are not finite."""
        fixing = "run `dspy-rag distill-policy` again"
        names = [f.name for f in fields(cls)]
        if not isinstance(raw, dict) or not all(name in raw for name in names):
            raise UserError(f"{path} is corrupt (its strategy chooser is not whole); {fixing}")
        strategies = raw["strategies"]
        if (not isinstance(strategies, list) or not strategies or not all(isinstance(s, str) for s in strategies)
                or len(set(strategies)) != len(strategies) or not set(strategies) <= set(STRATEGIES)):
            raise UserError(f"{path} is corrupt (its strategies are not among {', '.join(STRATEGIES)}); {fixing}")
        if raw["features"] != list(QUERY_FEATURES):
            raise UserError(f"{path} chooses strategies from other query features than this program computes; "
                            f"{fixing}")
        rows = raw["coefficients"]
        width = len(QUERY_FEATURES)
        if not (isinstance(rows, list) and len(rows) == len(strategies)
                and all(finite_numbers(r, width) for r in rows) and finite_numbers(raw["intercepts"], len(strategies))
                and finite_numbers(raw["means"], width) and finite_numbers(raw["scales"], width)):
            raise UserError(f"{path} is corrupt (its strategy coefficients do not fit its features); {fixing}")
        if any(s <= 0 for s in raw["scales"]):
            raise UserError(f"{path} is corrupt (a query feature scale is not positive); {fixing}")
        return cls(**{name: raw[name] for name in names})
