import random

import pytest

from ragopt.errors import InputError
from ragopt.eval.bootstrap import compare_to_baseline, paired_bootstrap_ci, regression
from synthetic_results import make_results


def _scores(n, seed, mean=0.7, sd=0.2):
    rng = random.Random(seed)
    return [min(1.0, max(0.0, rng.gauss(mean, sd))) for _ in range(n)]


def test_identical_runs_never_regress():
    for seed in range(5):
        base = _scores(200, seed)
        v = regression(base, list(base), tolerance=0.0, metric="ndcg@10", seed=seed)
        assert not v.regressed and v.diff == 0 and v.ci_low == 0 and v.ci_high == 0


def test_big_drop_regresses():
    base = _scores(200, 1)
    cur = [max(0.0, x - 0.15) for x in base]
    v = regression(cur, base, tolerance=0.02, metric="ndcg@10")
    assert v.regressed and v.ci_high < -0.02
    assert "regression beyond tolerance 0.02" in v.message


def test_noise_within_tolerance_does_not_regress():
    rng = random.Random(5)
    base = _scores(300, 2)
    cur = [min(1.0, max(0.0, x + rng.gauss(-0.005, 0.05))) for x in base]  # small noisy drop
    v = regression(cur, base, tolerance=0.02, metric="recall@10")
    assert not v.regressed
    assert v.ci_low < v.diff < v.ci_high


def test_small_sample_drop_is_not_significant():
    # a mean drop beyond tolerance, but on 5 noisy queries: the CI straddles, so no failure
    base = [0.9, 0.1, 0.8, 0.2, 0.7]
    cur = [0.3, 0.6, 0.9, 0.1, 0.5]
    v = regression(cur, base, tolerance=0.01, metric="ndcg@10")
    assert v.diff < -0.01 and not v.regressed and "not significant" in v.message


def test_deterministic_with_seed_and_latency_direction():
    a, b = _scores(100, 3), _scores(100, 4)
    assert paired_bootstrap_ci(a, b, seed=9) == paired_bootstrap_ci(a, b, seed=9)
    assert paired_bootstrap_ci(a, b, seed=9) != paired_bootstrap_ci(a, b, seed=10)
    slow = [x * 10 + 20 for x in a]
    fast = [x * 10 for x in a]
    assert regression(slow, fast, tolerance=1.0, metric="p95_ms").regressed  # latency up is worse
    assert not regression(fast, slow, tolerance=1.0, metric="p95_ms").regressed


def test_none_pairs_dropped_and_misaligned_rejected():
    ci = paired_bootstrap_ci([0.5, None, 0.7], [0.4, 0.9, None])
    assert ci.n == 1 and ci.mean_diff == pytest.approx(0.1)
    with pytest.raises(ValueError):
        paired_bootstrap_ci([0.1, 0.2], [0.1])


def test_compare_to_baseline():
    base = make_results(n_queries=40, seed=3)
    same = compare_to_baseline(base, base, tolerance=0.0, baseline_path="base.json")
    assert not same.regressed and {v.trial_id for v in same.verdicts} == {base.selected}
    assert {v.metric for v in same.verdicts} == {"ndcg@10", "recall@10"}

    worse = base.model_copy(deep=True)
    t = worse.trial(base.selected)
    t.per_query["ndcg@10"] = [max(0.0, x - 0.3) for x in t.per_query["ndcg@10"]]
    cmp = compare_to_baseline(worse, base, tolerance=0.05)
    assert cmp.regressed
    assert [v.metric for v in cmp.verdicts if v.regressed] == ["ndcg@10"]

    # query order does not matter: pairing is by query id
    shuffled = base.model_copy(deep=True)
    order = list(reversed(range(len(base.query_ids))))
    shuffled.query_ids = [base.query_ids[i] for i in order]
    for tr in shuffled.trials:
        tr.per_query = {m: [vals[i] for i in order] for m, vals in tr.per_query.items()}
    assert all(v.diff == 0 for v in compare_to_baseline(shuffled, base, tolerance=0).verdicts)

    other = base.model_copy(deep=True)
    other.dataset.fingerprint = "different"
    with pytest.raises(InputError) as e:
        compare_to_baseline(other, base, tolerance=0.0)
    assert e.value.field == "baseline"
