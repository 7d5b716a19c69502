"""Reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009): score = sum of 1 / (rrf_k + rank)."""

from __future__ import annotations

import math
from typing import Sequence

from ragopt.fusion.order import Key, Ranking, by_score_then_key


def rrf(rankings: Sequence[Ranking], rrf_k: float = 60) -> list[tuple[Key, float]]:
    terms: dict[Key, list[float]] = {}
    for ranking in rankings:
        for rank, (key, _score) in enumerate(ranking, start=1):
            terms.setdefault(key, []).append(1.0 / (rrf_k + rank))
    # fsum is exact, so equal rank sets give equal scores whatever order the lists came in.
    return by_score_then_key({key: math.fsum(t) for key, t in terms.items()})
