"""Figures stated in text, each with its slot: what quantity it is a value of.

A figure is an amount of money with its scale ("$12.4 million"), a percentage, a date, or a person's name in a
role ("chief executive officer Jane Doe"). Its slot is read from the words of its own clause: the metric words
right before it ("Data Center revenue"), whose they are ("NVIDIA's"), the period ("fiscal 2023", "fourth
quarter"), and whether it is a level or a change ("was $15.01 billion" vs "up 41%"). Two figures of the same slot
that differ are a disagreement; a figure whose slot cannot be read (a table cell, "up 41%" with no subject) has
none and is never compared.
"""

import re
from dataclasses import dataclass

SCALES = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}
MONTHS = ("january february march april may june july august september october november december").split()
_MONTH = "|".join(m.capitalize() for m in MONTHS)
_FIGURE = re.compile(
    r"(?P<money>\$\s?(?P<amount>\d[\d,]*(?:\.\d+)?)\s*(?P<scale>thousand|million|billion|trillion)\b)"
    r"|(?P<percent>(?P<share>\d+(?:\.\d+)?)\s?(?:%|percent\b))"
    rf"|(?P<date>\b(?P<month>{_MONTH})\s+(?P<day>\d{{1,2}}),\s+(?P<year>(?:19|20)\d\d)\b)"
    r"|(?P<role>\b(?P<title>chief executive officer|chief financial officer|CEO|CFO)\b(?:\s*,)?(?:\s+(?:is|was))?\s+)"
    r"(?P<name>[A-Z][a-z]+(?:[ -][A-Z][a-z]+){1,2})")
_TOKEN = re.compile(r"[A-Za-z][\w&'\u2019-]*|\d+(?:[.,]\d+)*|[^\w\s]")
_YEAR = re.compile(r"\b(?:19|20)\d\d\b")
_QUARTER = re.compile(r"\b(first|second|third|fourth) (quarter|half)\b|\bq([1-4])\b", re.I)
_A_VERB = re.compile(r"[a-z]{3,}ed")  # "we returned $10.44 billion": what was done, not whose value it is
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])|\n")
# Words between a metric and its figure that say how it is stated, not what it is.
LINKING = frozenset(
    "was were is are be been being of at to in for on as totaled totalled total reached amounted came reported "
    "recorded approximately about nearly roughly around some a an the fiscal year years quarter half full first "
    "second third fourth fy ended ending its our their had has have paid spent made with".split())
CHANGES = frozenset("up down increased decreased rose grew fell declined dropped increase decrease growth gain "
                    "loss change changed higher lower by".split())
# A figure after these is another quantity's (a comparison, the prior period, a part).
NOT_ITS_OWN = frozenset("from compared versus vs than against excluding including over".split())
STOPWORDS = frozenset("and or but with this that these those which who what when where how not no its it our we "
                      "they their there such other than each".split())
ROLES = {"ceo": "chief executive officer", "cfo": "chief financial officer"}
MAX_METRIC_WORDS = 4
AGREE = 0.01  # values within 1% of each other state the same figure, rounded ("$15.01 billion", "$15,005 million")


@dataclass(frozen=True)
class Slot:
    """What a figure is a value of; two figures share a slot when everything but `owner` is equal and their owners
    (when both are named) are too."""

    metric: tuple[str, ...]
    period: tuple[str, ...]  # its years and quarter, e.g. ("2023",) or ("2023", "q4")
    unit: str  # usd, percent, date, name
    change: bool  # "up 41%" is a change, "41% of revenue" a level
    owner: str | None  # "nvidia" from "NVIDIA's Data Center revenue"

    def same_as(self, other: "Slot") -> bool:
        owners_agree = self.owner is None or other.owner is None or self.owner == other.owner
        return (self.metric, self.period, self.unit, self.change) == (
            other.metric, other.period, other.unit, other.change) and owners_agree

    def describe(self) -> str:
        """The slot in words, e.g. "Data Center revenue in 2023"."""
        years = [p for p in self.period if p.isdigit()]
        quarter = [p for p in self.period if not p.isdigit()]
        when = f" in {' '.join(quarter + years)}" if self.period else ""
        return " ".join(self.metric) + when


@dataclass(frozen=True)
class Figure:
    """A value as the text states it (`text`), comparable (`value`), and its slot."""

    text: str
    value: float | str
    slot: Slot

    def agrees_with(self, other: "Figure") -> bool:
        return same_value(self.value, other.value)


def same_value(a: float | str, b: float | str) -> bool:
    """Two values state the same figure: equal, or numbers within `AGREE` of each other."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= AGREE * max(abs(a), abs(b))
    return a == b


def _value(match: re.Match[str]) -> tuple[str, float | str]:
    if match["money"]:
        return "usd", float(match["amount"].replace(",", "")) * SCALES[match["scale"]]
    if match["percent"]:
        return "percent", float(match["share"])
    if match["date"]:
        return "date", f"{match['year']}-{MONTHS.index(match['month'].lower()) + 1:02}-{int(match['day']):02}"
    return "name", match["name"]


def _metric(before: str) -> tuple[tuple[str, ...], str | None, bool, bool]:
    """The metric words ending right before a figure, their owner, whether the figure is a change, and whether
    it is the clause's own value (not a comparison's)."""
    tokens = _TOKEN.findall(before)
    linking: list[str] = []
    while tokens and ((word := tokens[-1].lower()) in LINKING or word in CHANGES or _YEAR.fullmatch(word)
                      or _A_VERB.fullmatch(word)):
        linking.append(tokens.pop().lower())
    own = not any(word in NOT_ITS_OWN for word in linking)
    metric: list[str] = []
    owner = None
    while tokens and len(metric) < MAX_METRIC_WORDS and tokens[-1][0].isalpha():
        word = tokens.pop()
        if word.lower().endswith(("'s", "\u2019s")):
            owner = word[:-2].lower()
            break
        if word.lower() in STOPWORDS or word.lower() in LINKING or word.lower() in CHANGES:
            break
        metric.insert(0, word.lower())
    return tuple(metric), owner, any(word in CHANGES for word in linking), own


def _period(clause: str, own_date: str | None) -> tuple[str, ...]:
    years = sorted(set(_YEAR.findall(clause.replace(own_date, " ") if own_date else clause)))
    quarters = sorted({(q[0] or f"q{q[2]}").lower() + ("" if q[2] else f" {q[1].lower()}")
                       for q in _QUARTER.findall(clause)})
    return (*quarters, *years)


def values_in(text: str) -> list[float | str]:
    """Every value a text states, slot or not (a short answer: "$14.0 million")."""
    return [_value(match)[1] for match in _FIGURE.finditer(text)]


def figures(text: str) -> list[Figure]:
    """The figures of a text whose slot can be read, in order."""
    found = []
    for sentence in _SENTENCE_END.split(text):
        matches = list(_FIGURE.finditer(sentence))
        for i, match in enumerate(matches):
            start = matches[i - 1].end() if i else 0
            end = matches[i + 1].start() if i + 1 < len(matches) else len(sentence)
            metric, owner, change, own = _metric(sentence[start:match.start()])
            unit, value = _value(match)
            if unit == "name":  # the role is the slot: "Acme's CEO is Jane Doe", "chief executive officer John Roe"
                title = match["title"].lower()
                metric, change, own = tuple(ROLES.get(title, title).split()), False, True
            if not metric or not own:
                continue
            clause = sentence[start:end]
            period = _period(clause, match["date"])
            if unit in ("usd", "percent") and not any(p.isdigit() for p in period):
                continue  # "revenue was $1 billion" with no year: a different year's, as likely as not
            if unit == "date" and owner is None:
                continue  # most dates are points of reference ("as of January 29, 2023"), not a named event's
            text_of = match["name"] if unit == "name" else match.group(0).strip()
            found.append(Figure(text_of, value, Slot(metric, period, unit, change, owner)))
    return found
