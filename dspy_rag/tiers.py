"""Source tiers: how far a source is trusted when sources disagree, 1 the most.

Each source gets the tier of the first configured rule it matches (`tiers:` in dspy-rag.yaml): by the path or URL
(a glob), by the web domain (a glob on the host; a rule for `sec.gov` also holds for `www.sec.gov`), or by the
kind of document (`document`: ingested by the user, `web`: found by web search, or an ingested file's type:
html, markdown, text, pdf). A source no rule matches gets the default tier.
"""

from fnmatch import fnmatch
from urllib.parse import urlsplit

from dspy_rag.config import TierConfig, TierRule

TIER_NAMES = {1: "the user's documents", 2: "a primary source", 3: "news", 4: "another web page"}


def tier_name(tier: int) -> str:
    """What a tier stands for under the default rules, e.g. "news"."""
    return TIER_NAMES.get(tier, f"tier {tier}")


def _host(source: str) -> str | None:
    return (urlsplit(source).hostname or "").lower() or None if source.startswith(("http://", "https://")) else None


def _matches(rule: TierRule, source: str, kind: str) -> bool:
    host = _host(source)
    if rule.path is not None and not fnmatch(source, rule.path):
        return False
    if rule.domain is not None and not (host and any(fnmatch(h, rule.domain.lower()) for h in _parents(host))):
        return False
    return rule.kind is None or rule.kind == kind or (rule.kind == "document" and kind != "web")


def _parents(host: str) -> list[str]:
    """The host and each domain it lies in: www.sec.gov, sec.gov, gov."""
    parts = host.split(".")
    return [".".join(parts[i:]) for i in range(len(parts))]


def tier_of(source: str, kind: str, tiers: TierConfig) -> int:
    """The tier of a source of this kind ("web", or the type of an ingested document)."""
    return next((rule.tier for rule in tiers.rules if _matches(rule, source, kind)), tiers.default)
