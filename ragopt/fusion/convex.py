"""Convex combination of normalized scores: alpha * first + (1 - alpha) * second.

Scores are normalized per ranking (min-max to [0, 1], or z-score); a key missing from one ranking gets that
ranking's lowest normalized score, as if it had been ranked just below the retrieved depth.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from ragopt.fusion.order import Key, Ranking, by_score_then_key


def normalize(scores: np.ndarray, method: Literal["minmax", "zscore"]) -> np.ndarray:
    if scores.size == 0:
        return scores
    if method == "minmax":
        span = scores.max() - scores.min()
        return (scores - scores.min()) / span if span > 0 else np.ones_like(scores)
    std = scores.std()
    return (scores - scores.mean()) / std if std > 0 else np.zeros_like(scores)


def convex(
    first: Ranking, second: Ranking, alpha: float = 0.5, norm: Literal["minmax", "zscore"] = "minmax"
) -> list[tuple[Key, float]]:
    normed = []
    for ranking in (first, second):
        values = normalize(np.asarray([s for _, s in ranking], dtype=float), norm)
        floor = float(values.min()) if values.size else 0.0
        normed.append(({key: float(v) for (key, _), v in zip(ranking, values)}, floor))
    (a, a_floor), (b, b_floor) = normed
    keys = list(dict.fromkeys([k for k, _ in first] + [k for k, _ in second]))
    fused = {k: alpha * a.get(k, a_floor) + (1 - alpha) * b.get(k, b_floor) for k in keys}
    return by_score_then_key(fused)
