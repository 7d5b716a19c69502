"""The one order every fused ranking follows: score descending, then key (the chunk id) ascending.

A total order makes a shorter list always the head of a longer one, which truncating a deep ranking to
each top-k relies on; ties (duplicate passages score the same) would otherwise fall in arbitrary order.
"""

from __future__ import annotations

from typing import Mapping, Sequence

Key = str  # a chunk id; any mutually comparable keys work
Ranking = Sequence[tuple[Key, float]]


def by_score_then_key(scores: Mapping[Key, float]) -> list[tuple[Key, float]]:
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
