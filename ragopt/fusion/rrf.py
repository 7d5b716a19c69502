"""Reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009): score = sum of 1 / (k + rank)."""

from __future__ import annotations

from typing import Hashable, Sequence

Ranking = Sequence[tuple[Hashable, float]]


def rrf(rankings: Sequence[Ranking], k: int = 60) -> list[tuple[Hashable, float]]:
    fused: dict[Hashable, float] = {}
    for ranking in rankings:
        for rank, (key, _score) in enumerate(ranking, start=1):
            fused[key] = fused.get(key, 0.0) + 1.0 / (k + rank)
    # Ties break by first appearance, which keeps the result deterministic.
    return sorted(fused.items(), key=lambda kv: -kv[1])
