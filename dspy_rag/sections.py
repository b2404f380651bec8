"""Match the loose way a planner names a section to the section titles an index holds.

"Item 1A", "Item 1A. Risk Factors", "ITEM 1A." and "risk factors" must all reach the chunks of
"Item 1A. Risk Factors"; an SEC item number decides when one is given, the title's words otherwise.
"""

import re
from collections.abc import Iterable

from dspy_rag.tokenizer import tokenize

_ITEM = re.compile(r"\bitem\s*(\d{1,2}[a-c]?)\b", re.I)
MIN_WORD_OVERLAP = 0.5
# Names analysts use for 10-K parts that share no word with the item's title.
ALIASES = {"md&a": "Item 7", "mda": "Item 7", "md & a": "Item 7"}


def _item(text: str) -> str | None:
    match = _ITEM.search(text)
    return match.group(1).upper() if match else None


def match_sections(wanted: str, titles: Iterable[str]) -> list[str]:
    """The titles `wanted` names; empty when it names none (the caller then searches everything)."""
    titles = list(dict.fromkeys(titles))
    wanted = ALIASES.get(wanted.strip().lower(), wanted)
    item = _item(wanted)
    if item:
        by_item = [t for t in titles if _item(t) == item and t.lower().startswith("item")]
        if by_item:
            return by_item
    words = set(tokenize(_ITEM.sub(" ", wanted)))
    if not words:
        return []
    overlap = {t: len(words & set(tokenize(t))) / len(words) for t in titles}
    best = max(overlap.values(), default=0.0)
    return [t for t, share in overlap.items() if share == best and share >= MIN_WORD_OVERLAP]
