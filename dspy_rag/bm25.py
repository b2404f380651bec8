"""BM25 with Lucene's idf.

Okapi's idf, log((N - n + 0.5) / (n + 0.5)), is zero or negative for a term found in half the documents
or more, so in a small corpus an exact keyword match can score nothing. Lucene's variant adds one inside
the log and stays positive.
"""

import math

from rank_bm25 import BM25Okapi


class LuceneBM25(BM25Okapi):
    def _calc_idf(self, nd: dict[str, int]) -> None:
        for word, freq in nd.items():
            self.idf[word] = math.log(1.0 + (self.corpus_size - freq + 0.5) / (freq + 0.5))
        self.average_idf = sum(self.idf.values()) / max(len(self.idf), 1)
