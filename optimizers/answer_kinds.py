"""The kind of a gold answer (yes/no, name, figure, date or list), read from its text by rules: what stratified
demo sampling balances, so a set whose questions are mostly of one kind still shows the model every kind."""

import re
from typing import Literal

AnswerKind = Literal["yes/no", "name", "figure", "date", "list"]
# The order kinds are served in when there are fewer demos than kinds.
KINDS: tuple[AnswerKind, ...] = ("yes/no", "name", "figure", "date", "list")

_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|december|"
           "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec")
_DATE = re.compile(rf"\b({_MONTHS})\b\.?|^(1[0-9]|20)\d\d(s|-\d\d(-\d\d)?)?$|^\d{{1,2}}/\d{{1,2}}/\d{{2,4}}$|"
                   r"\b\d{1,2}(st|nd|rd|th) century\b", re.IGNORECASE)
_QUALIFIER = r"(about|approximately|around|roughly|nearly|almost|over|under|more than|less than|up to)\s+"
# A number (not an ordinal or a model name such as A800), with its currency, unit and up to three words after it.
_FIGURE = re.compile(rf"^({_QUALIFIER})?[$€£¥]?\s?\d[\d,.]*(?![A-Za-z\d])\s?%?(\s+\S+){{0,3}}$", re.IGNORECASE)
_NUMBER_WORDS = re.compile(r"^(once|twice|thrice|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
                           r"a dozen|dozens|hundreds|thousands)(\s+\S+)?$", re.IGNORECASE)
# "TSMC and Samsung", "A; B", "A, B, C"; one comma alone is a place or a suffix ("Columbus, Ohio", "Hank Williams, Jr.").
_LIST = re.compile(r"\s(and|or)\s|;|,[^,]+,", re.IGNORECASE)


def answer_kind(answer: str) -> AnswerKind:
    """yes/no, date (a year, a month, a full date, a century), figure (a number, sum, share or count), list
    (several items joined by commas, "and" or "or"), else name."""
    text = answer.strip().rstrip(".!").strip()
    if text.lower() in ("yes", "no"):
        return "yes/no"
    if _DATE.search(text):
        return "date"
    if _FIGURE.match(text) or _NUMBER_WORDS.match(text):
        return "figure"
    if _LIST.search(text):
        return "list"
    return "name"
