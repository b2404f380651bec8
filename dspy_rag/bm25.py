"""BM25 with Lucene's idf.

Okapi's idf, log((N - n + 0.5) / (n + 0.5)), is zero or negative for a term found in half the documents
or more, so in a small corpus an exact keyword match can score nothing. Lucene's variant adds one inside
the log and stays positive. `LuceneBM25` (rank-bm25) is the reference the catalog's persisted postings
(dspy_rag.postings) are tested against; both score with the parameters below.
"""

import math

from rank_bm25 import BM25Okapi

K1 = 1.5  # rank-bm25's defaults
B = 0.75


def lucene_idf(documents: int, containing: int) -> float:
    """The idf of a term found in `containing` of `documents` documents."""
    return math.log(1.0 + (documents - containing + 0.5) / (containing + 0.5))


class LuceneBM25(BM25Okapi):
    def __init__(self, corpus: list[list[str]]) -> None:
        super().__init__(corpus, k1=K1, b=B)

    def _calc_idf(self, nd: dict[str, int]) -> None:
        for word, freq in nd.items():
            self.idf[word] = lucene_idf(self.corpus_size, freq)
        self.average_idf = sum(self.idf.values()) / max(len(self.idf), 1)
