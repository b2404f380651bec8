"""Answer and evidence metrics: the one place that scores answers, for evaluation and as compile's metric.

Answer metrics follow the SQuAD/HotpotQA recipe, except where `normalize_answer` says otherwise.
"""

import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields

from dspy_rag.sections import ALIASES, _item
from dspy_rag.tokenizer import tokenize

_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_CLOSED_ANSWERS = frozenset({"yes", "no", "noanswer"})


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and currency symbols, drop articles a/an/the, collapse whitespace.

    Deliberate deviations from the SQuAD script, so that figures compare by value: a decimal point
    between digits is kept ("26.97" stays distinct from "2697", which SQuAD conflates) while thousands
    separators still go ("26,974" == "26974"); currency symbols go too ("$26.97 billion" ==
    "26.97 billion", "€5" == "5"). Punctuation is any Unicode punctuation, not only ASCII, so curly
    quotes and dashes from generated text are dropped like their ASCII forms.
    """
    text = text.lower()
    kept = []
    for i, char in enumerate(text):
        category = unicodedata.category(char)
        if char == "." and 0 < i < len(text) - 1 and text[i - 1].isdigit() and text[i + 1].isdigit():
            kept.append(char)
        elif not (category.startswith("P") or category == "Sc"):
            kept.append(char)
    return " ".join(_ARTICLES.sub(" ", "".join(kept)).split())


def _strings(values: Collection[str], name: str) -> list[str]:
    # A bare str is a Sequence[str] too; scoring it would silently compare single characters.
    if isinstance(values, str):
        raise TypeError(f"{name} must be a sequence of strings, not a string")
    return list(values)


def _golds(gold: str, aliases: Sequence[str]) -> list[str]:
    return [normalize_answer(g) for g in [gold, *_strings(aliases, "aliases")]]


def exact_match(prediction: str, gold: str, aliases: Sequence[str] = ()) -> float:
    """1.0 when the normalised prediction equals the normalised gold or any alias, else 0.0."""
    predicted = normalize_answer(prediction)
    return float(any(predicted == g for g in _golds(gold, aliases)))


def _f1(predicted: str, gold: str) -> float:
    # A closed answer (yes/no/noanswer) is right or wrong; sharing no other token must not earn partial credit.
    if (predicted in _CLOSED_ANSWERS or gold in _CLOSED_ANSWERS) and predicted != gold:
        return 0.0
    predicted_tokens, gold_tokens = predicted.split(), gold.split()
    if not predicted_tokens or not gold_tokens:
        return float(predicted_tokens == gold_tokens)
    common = sum((Counter(predicted_tokens) & Counter(gold_tokens)).values())
    # 2PR/(P+R) with P = common/|pred| and R = common/|gold|, in one division.
    return 2 * common / (len(predicted_tokens) + len(gold_tokens))


def token_f1(prediction: str, gold: str, aliases: Sequence[str] = ()) -> float:
    """The best token-level F1 (bags of tokens, with multiplicity) of the prediction against gold and aliases.

    Against a yes/no/noanswer on either side, F1 is 0.0 unless the two sides are equal.
    """
    predicted = normalize_answer(prediction)
    return max(_f1(predicted, g) for g in _golds(gold, aliases))


def _contains(predicted: list[str], gold: list[str]) -> bool:
    width = len(gold)
    return width > 0 and any(predicted[i:i + width] == gold for i in range(len(predicted) - width + 1))


def answer_contains(prediction: str, gold: str, aliases: Sequence[str] = ()) -> float:
    """1.0 when a normalised gold or alias occurs as a run of whole tokens in the normalised prediction.

    Lenient on purpose: small models wrap the answer in a sentence. "26.97" does not occur in "126.97";
    an empty gold occurs nowhere. A prediction that says both "yes" and "no" contains neither.
    """
    predicted = normalize_answer(prediction).split()
    hedged = {"yes", "no"} <= set(predicted)
    for gold_text in _golds(gold, aliases):
        if hedged and gold_text in _CLOSED_ANSWERS:
            continue
        if _contains(predicted, gold_text.split()):
            return 1.0
    return 0.0


def evidence_recall(retrieved_ids: Sequence[str], gold_ids: Sequence[str]) -> float | None:
    """The share of distinct gold ids found among the retrieved ids; None when there is no gold."""
    gold = set(_strings(gold_ids, "gold_ids"))
    if not gold:
        return None
    return len(gold & set(_strings(retrieved_ids, "retrieved_ids"))) / len(gold)


def same_section(a: str, b: str) -> bool:
    """Whether two section names name the same section (see `section_recall`)."""
    a, b = ALIASES.get(a.strip().lower(), a), ALIASES.get(b.strip().lower(), b)
    item_a, item_b = _item(a), _item(b)
    if item_a and item_b:
        return item_a == item_b
    # match_sections' half-the-words threshold suits a search that ranks titles, but one pair at a time it
    # lets "risk factors" hit "Item 7A. ... Market Risk"; here one name's words must all be in the other's.
    words_a, words_b = set(tokenize(a)), set(tokenize(b))
    return bool(words_a and words_b) and (words_a <= words_b or words_b <= words_a)


def section_recall(retrieved_sections: Sequence[str], gold_sections: Sequence[str]) -> float | None:
    """The share of distinct gold sections that some retrieved section names; None when there is no gold.

    Names compare with `dspy_rag.sections`' item numbers, aliases and stemmed words, so a retrieved
    "Item 1A. Risk Factors" hits a gold "Item 1A", "ITEM 1A." or "risk factors": two item numbers
    decide alone, else one name's words must all occur in the other's.
    """
    gold = list(dict.fromkeys(_strings(gold_sections, "gold_sections")))
    if not gold:
        return None
    retrieved = list(dict.fromkeys(_strings(retrieved_sections, "retrieved_sections")))
    hits = sum(any(same_section(g, r) for r in retrieved) for g in gold)
    return hits / len(gold)


def citation_validity(cited_ids: Sequence[str], retrieved_ids: Collection[str]) -> float | None:
    """The share of distinct cited ids that are among the retrieved ids; None when nothing is cited.

    Citing the same passage twice counts once, so repetition can neither inflate nor dilute the share.
    """
    cited = set(_strings(cited_ids, "cited_ids"))
    if not cited:
        return None
    retrieved = set(_strings(retrieved_ids, "retrieved_ids"))
    return len(cited & retrieved) / len(cited)


@dataclass(frozen=True)
class AnswerScores:
    """All scores of one answer; the evidence scores are None where they are undefined."""

    em: float
    f1: float
    contains: float
    evidence_recall: float | None
    citation_validity: float | None


COMPONENTS = tuple(f.name for f in fields(AnswerScores))


def score_answer(
    prediction: str,
    gold: str,
    aliases: Sequence[str] = (),
    *,
    retrieved_ids: Sequence[str] = (),
    gold_ids: Sequence[str] = (),
    cited_ids: Sequence[str] = (),
) -> AnswerScores:
    """Every score of one question's answer, its retrieved evidence and its citations."""
    return AnswerScores(
        em=exact_match(prediction, gold, aliases),
        f1=token_f1(prediction, gold, aliases),
        contains=answer_contains(prediction, gold, aliases),
        evidence_recall=evidence_recall(retrieved_ids, gold_ids),
        citation_validity=citation_validity(cited_ids, retrieved_ids),
    )


def weighted_score(scores: AnswerScores, weights: Mapping[str, float]) -> float:
    """The weighted mean of the chosen components, e.g. {"f1": 0.7, "evidence_recall": 0.3}.

    Components that are None for this answer are skipped and the remaining weights renormalised;
    0.0 when every weighted component is None. Unknown names and negative weights raise ValueError,
    so a typo cannot silently drop a component.
    """
    unknown = set(weights) - set(COMPONENTS)
    if unknown:
        raise ValueError(f"unknown score components {sorted(unknown)}; choose from {list(COMPONENTS)}")
    if any(w < 0 for w in weights.values()) or not any(w > 0 for w in weights.values()):
        raise ValueError("weights must be non-negative with at least one positive")
    present = {name: (w, getattr(scores, name)) for name, w in weights.items() if getattr(scores, name) is not None}
    total = sum(w for w, _ in present.values())
    if total == 0:
        return 0.0
    return sum(w * value for w, value in present.values()) / total
