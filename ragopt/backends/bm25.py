"""Keyword retrieval: BM25 behind one interface, with rank-bm25 and bm25s as interchangeable backends.

Both backends score with Lucene's BM25 (idf = ln(1 + (N - n + 0.5) / (n + 0.5))), the variant the published
Anserini baselines use, with the same k1 and b, so they rank identically; bm25s is the default because the
benchmark (benchmarks/bench_bm25_backends.py) measures it far faster. Text becomes terms through the index's
analyzer (ragopt.text.analyzers: English, Chinese or whitespace), for documents and queries alike. Permission filtering happens before
ranking: chunks the query may not see are masked out of the score vector, never trimmed after a top-k.
"""

from __future__ import annotations

import math
from typing import Iterable, Protocol, Sequence

import numpy as np

from ragopt.config import BM25Config
from ragopt.text import Analyzer, ScriptShare, detect_analyzer, make_analyzer


def bm25_analyzer(config: BM25Config, corpus: Iterable[str] | ScriptShare = ()) -> Analyzer:
    """The analyzer `config` gives for `corpus` (its texts or script shares: what "auto" looks at)."""
    name = config.analyzer if config.analyzer != "auto" else detect_analyzer(corpus)
    return make_analyzer(name, config.stopwords, config.stemmer)


class BM25Backend(Protocol):
    def scores(self, query_tokens: list[str]) -> np.ndarray: ...


class BM25sBackend:
    def __init__(self, corpus_tokens: Sequence[list[str]], k1: float, b: float):
        import bm25s

        self.model = bm25s.BM25(k1=k1, b=b, method="lucene")
        self.model.index(list(corpus_tokens), show_progress=False)

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        known = [t for t in query_tokens if t in self.model.vocab_dict]
        if not known:
            return np.zeros(self.model.scores["num_docs"], dtype=np.float32)
        return self.model.get_scores(known)


class RankBM25Backend:
    def __init__(self, corpus_tokens: Sequence[list[str]], k1: float, b: float):
        from rank_bm25 import BM25Okapi

        class LuceneBM25(BM25Okapi):
            def _calc_idf(self, nd):  # type: ignore[no-untyped-def]
                n = self.corpus_size
                self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in nd.items()}

        self.model = LuceneBM25([list(t) for t in corpus_tokens], k1=k1, b=b)
        self.k1 = k1

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        # BM25Okapi multiplies every term by (k1 + 1); dividing it out gives Lucene's exact scores.
        return np.asarray(self.model.get_scores(query_tokens), dtype=np.float32) / (self.k1 + 1)


BACKENDS = {"bm25s": BM25sBackend, "rank_bm25": RankBM25Backend}


class BM25Index:
    """BM25 over `texts`; documents and queries both go through `analyzer` (default: the config's, "auto"
    detected from these texts)."""

    def __init__(self, texts: Sequence[str], config: BM25Config, analyzer: Analyzer | None = None):
        self.config = config
        self.tokenize = analyzer or bm25_analyzer(config, texts)
        corpus_tokens = [self.tokenize(t) for t in texts]
        self.backend: BM25Backend = BACKENDS[config.backend](corpus_tokens, config.k1, config.b)
        self.size = len(texts)

    def search(self, text: str, k: int, allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
        """(chunk position, score) of the k best chunks with a positive score among `allowed` (a bool mask).

        The order is total: score descending, then chunk position (its line in the index's chunks.jsonl), so
        the top k is always the head of the top k + n, even when many chunks tie at the cut-off.
        """
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        scores = np.asarray(self.backend.scores(self.tokenize(text)), dtype=np.float32)
        if allowed is not None:
            scores = np.where(allowed, scores, -np.inf)
        candidates = np.flatnonzero(scores > 0)
        if candidates.size > k:
            # Keep every chunk that scores at least the k-th best score: a partition alone would keep an
            # arbitrary subset of the chunks tied at the cut-off.
            kth = np.partition(scores[candidates], candidates.size - k)[candidates.size - k]
            candidates = candidates[scores[candidates] >= kth]
        order = candidates[np.lexsort((candidates, -scores[candidates]))][:k]
        return [(int(i), float(scores[i])) for i in order]
