"""The total order of fused rankings: fused score descending, then chunk id, whatever order the inputs came in."""

from __future__ import annotations

import random

from ragopt.fusion import convex, rrf
from ragopt.fusion.order import by_score_then_key


def test_equal_scores_are_ordered_by_key() -> None:
    assert by_score_then_key({"c": 1.0, "a": 1.0, "b": 2.0, "d": 0.5}) == [("b", 2.0), ("a", 1.0), ("c", 1.0), ("d", 0.5)]


def test_rrf_ties_follow_the_key_not_the_order_of_the_lists() -> None:
    # a and b are first in one list and second in the other: equal fused scores, so key order decides
    one = rrf([[("b", 9.0), ("a", 1.0)], [("a", 9.0), ("b", 1.0)]])
    two = rrf([[("a", 9.0), ("b", 1.0)], [("b", 9.0), ("a", 1.0)]])
    assert [k for k, _ in one] == [k for k, _ in two] == ["a", "b"]
    assert one[0][1] == one[1][1]


def test_rrf_over_three_lists_gives_equal_rank_sets_equal_scores() -> None:
    # x ranks 1, 2, 3 and y ranks 3, 1, 2: the same terms, added in another order. With k=2, plain float
    # addition makes (1/3 + 1/4) + 1/5 and (1/5 + 1/3) + 1/4 differ in the last bit, which would split the tie.
    lists = [[("x", 0), ("m", 0), ("y", 0)], [("y", 0), ("x", 0), ("n", 0)], [("o", 0), ("y", 0), ("x", 0)]]
    fused = rrf(lists, rrf_k=2)
    scores = dict(fused)
    assert scores["x"] == scores["y"]
    assert [k for k, _ in fused][:2] == ["x", "y"]


def test_convex_over_duplicates_is_a_total_order_and_shorter_is_the_head_of_longer() -> None:
    # 30 chunks with identical dense and keyword scores (duplicate passages) among distinct ones
    rng = random.Random(1)
    ids = [f"c{i:03d}" for i in range(60)]
    dense = {cid: 0.8 if i < 30 else rng.random() * 0.7 for i, cid in enumerate(ids)}
    keyword = {cid: 12.0 if i < 30 else rng.random() * 10 for i, cid in enumerate(ids)}
    d_rank = sorted(dense.items(), key=lambda kv: -kv[1])
    k_rank = sorted(keyword.items(), key=lambda kv: -kv[1])
    for shuffle_seed in range(3):  # the order in which tied inputs arrive must not matter
        rng2 = random.Random(shuffle_seed)
        d_in, k_in = d_rank[:], k_rank[:]
        rng2.shuffle(d_in)
        rng2.shuffle(k_in)
        fused = convex(sorted(d_in, key=lambda kv: -kv[1]), sorted(k_in, key=lambda kv: -kv[1]), alpha=0.3)
        assert [k for k, _ in fused[:30]] == ids[:30]  # the tied duplicates by id
        assert fused == sorted(fused, key=lambda kv: (-kv[1], kv[0]))
