"""The keyword tokenizer behind BM25: lowercase, word/number tokens, English stopwords, Snowball stems.

Splitting on spaces leaves punctuation glued to words ("revenue," never matches "revenue"); stemming
lets "risks" match "risk". Numbers keep their decimal point so "15.01" stays one token.
"""

import re
from functools import lru_cache

import snowballstemmer

_TOKEN = re.compile(r"[a-z0-9]+(?:[.'][a-z0-9]+)*")

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of
    off on once only or other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up very was we were what
    when where which while who whom why will with would you your yours yourself yourselves""".split()
)

_stemmer = snowballstemmer.stemmer("english")


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return _stemmer.stemWord(word)


def tokenize(text: str) -> list[str]:
    """Tokens for BM25 indexing and querying; the same function must serve both sides."""
    words = (w.replace("'", "") for w in _TOKEN.findall(text.lower().replace("\u2019", "'")))
    return [_stem(w) for w in words if w not in STOPWORDS]
