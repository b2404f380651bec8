"""The answer a step found, as the next step of a chain needs it: the name or figure its finding adds to its
sub-question. A plan's "What is the waterfall in the answer of step 1?" then searches for "Zimbabwe", not
for the words "the answer of step 1"."""

import re

# A finding's words: figures (with their $, %, decimals and scale) and words; capitalised runs of words are names.
WORD = re.compile(r"\$?\d(?:[\d,.]*\d)?%?(?: (?:thousand|million|billion|trillion)\b)?|[^\W\d_][\w'’-]*|[,;:()&]")
JOINERS = frozenset({"&", "of", "the", "and", "de", "del", "la", "le", "von", "van", "da", "di", "du"})
ASKS_FOR_FIGURE = re.compile(r"\b(?:how (?:many|much)|when|what (?:year|percentage|share|amount|number)|revenue|"
                             r"income|sales|margin|price|cost|rate|growth)\b", re.IGNORECASE)
ASKS_FOR_NAME = re.compile(r"\b(?:which|who|whom|whose)\b", re.IGNORECASE)
MONTH = re.compile(r"(?:January|February|March|April|May|June|July|August|September|October|November|December)\b")


def _plain(word: str) -> str:
    return re.sub(r"['’]s$", "", word.lower())


def _is_figure(name: str) -> bool:
    """Amounts, years and dates ("October 25"): what a question for a place or a person does not want."""
    return any(c.isdigit() for c in name) or bool(MONTH.match(name))


def names_in(sentence: str) -> list[str]:
    """The names and figures a sentence states, in order: runs of capitalised words (joined by "of", "de"
    and the like) and numbers."""
    runs: list[list[str]] = [[]]
    for word in WORD.findall(sentence):
        if word[0].isupper() or _is_figure(word):
            runs[-1].append(word)
        elif word.lower() in JOINERS and runs[-1]:
            runs[-1].append(word)
        elif runs[-1]:
            runs.append([])
    names = []
    for run in runs:
        kept = [i for i, word in enumerate(run) if word.lower() not in JOINERS]
        if kept:
            names.append(" ".join(run[kept[0]: kept[-1] + 1]))
    return names


def answer_in(finding: str, sub_question: str) -> str | None:
    """What a finding adds to its sub-question: its first name or figure with a word the question lacks
    ("Zimbabwe" in "The Bubye River is found in Zimbabwe." for "Where is the Bubye River found?"); figures
    first when the question asks for one, names first otherwise."""
    asked = {_plain(w) for w in WORD.findall(sub_question)}
    new = [name for name in names_in(finding)
           if any(_plain(w) not in asked and w.lower() not in JOINERS for w in WORD.findall(name))]
    wants_figure = bool(ASKS_FOR_FIGURE.search(sub_question)) and not ASKS_FOR_NAME.search(sub_question)
    new.sort(key=lambda name: _is_figure(name) != wants_figure)  # stable: otherwise in the finding's order
    return new[0] if new else None
