"""The conflicts guard (both programs): when the evidence gives different values for the question's quantity,
the answer says so, citing each value's passage, and prefers the value of the single highest-tier source; the
short answer, when it named another value, becomes that one.

Code, not the LM: the values are found by dspy_rag/figures.py, the sentences written from them, each citing the
passage that states its value, so the citation check holds them to the passages like any other sentence.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dspy_rag.citations import source_name
from dspy_rag.config import TierConfig
from dspy_rag.conflicts import Conflict, conflicts
from dspy_rag.figures import same_value, values_in
from dspy_rag.index import Index
from dspy_rag.pipelines.guards import Fired
from dspy_rag.retrieval import Passage
from dspy_rag.tiers import tier_name, tier_of


def _name(passage: Passage) -> str:
    return source_name(passage.source)


def sentences_for(conflict: Conflict, evidence: Sequence[Passage]) -> list[str]:
    """The disagreement, each value with its source and tier, and which one the answer prefers."""
    cited = ", ".join(str(v.passages[0]) for v in conflict.values)
    out = [f"The sources disagree on {conflict.slot.describe()} [{cited}]."]
    for value in conflict.values:
        n = value.passages[0]
        out.append(f"According to {_name(evidence[n - 1])} ({tier_name(value.tier)}), it is {value.text} [{n}].")
    if (best := conflict.preferred) is not None:
        n = best.passages[0]
        out.append(f"This answer prefers {best.text} from {_name(evidence[n - 1])}, which ranks above the other "
                   f"sources by tier [{n}].")
    return out


def as_json(conflict: Conflict, evidence: Sequence[Passage]) -> dict[str, Any]:
    """A conflict as `ask --json` and the trajectory list it: the quantity, each passage's value, the preferred."""
    preferred = conflict.preferred
    return {"quantity": conflict.slot.describe(), "preferred": preferred.text if preferred else None,
            "values": [{"value": v.text, "tier": v.tier, "id": evidence[n - 1].id, "source": evidence[n - 1].source,
                        "section": evidence[n - 1].section} for v in conflict.values for n in v.passages]}


def document_kinds(index: Index) -> dict[str, str]:
    """Each ingested source's document type (html, markdown, text, pdf); a source not in it is the web's."""
    return {source: meta.get("kind", "document") for source, meta in index.sources.items()}


@dataclass(frozen=True)
class ConflictGuard:
    """Finds the question's conflicts in the evidence, ranking each source by its tier; switched off (`on`), it
    finds none."""

    tiers: TierConfig
    on: bool = True

    def __call__(self, question: str, short_answer: str, evidence: Sequence[Passage], kinds: Mapping[str, str]
                 ) -> tuple[str, list[Conflict], list[Fired]]:
        """The short answer (the preferred value when it named another one), the conflicts, the guard's firings;
        `kinds` as `document_kinds` gives them."""
        if not self.on:
            return short_answer, [], []
        tiers = [tier_of(p.source, kinds.get(p.source, "web"), self.tiers) for p in evidence]
        found = conflicts(question, evidence, tiers)
        fired = []
        for conflict in found:
            values = ", ".join(f"{v.text} ({_name(evidence[v.passages[0] - 1])})" for v in conflict.values)
            best = conflict.preferred
            named = values_in(short_answer)
            others = [v.figure.value for v in conflict.values[1:]]
            if best is not None and any(same_value(x, v) for x in named for v in others):
                fired.append(Fired("conflicts", f"the short answer: {short_answer}",
                                   f"answered {best.text} instead", "it is the higher-tier source's value"))
                short_answer = best.text
            fired.append(Fired("conflicts", f"{conflict.slot.describe()}: {values}",
                               "stated each value with its source", "the sources disagree"))
        return short_answer, found, fired


def with_conflicts(draft: str, found: Sequence[Conflict], evidence: Sequence[Passage]) -> str:
    """The draft answer followed by each conflict's sentences."""
    return " ".join([draft, *(s for conflict in found for s in sentences_for(conflict, evidence))])
