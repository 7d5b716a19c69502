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


def test_interval_of_a_constant_difference_is_that_difference():
    # every query drops by exactly 0.25 (binary fractions: exact in floating point): every resample's mean
    # is -0.25, so the interval is [-0.25, -0.25]
    base = [0.5, 0.75, 1.0, 0.25] * 10
    ci = paired_bootstrap_ci([b - 0.25 for b in base], base)
    assert (ci.mean_diff, ci.low, ci.high, ci.n) == (-0.25, -0.25, -0.25, 40)


def test_interval_of_two_queries_spans_their_differences():
    # diffs -1 and 0: a resample's mean is -1, -0.5 or 0 with chances 1/4, 1/2, 1/4, so the 95% percentile
    # interval is [-1, 0], and 2000 seeded resamples hit both ends
    ci = paired_bootstrap_ci([0.0, 1.0], [1.0, 1.0])
    assert (ci.mean_diff, ci.low, ci.high) == (-0.5, -1.0, 0.0)


def test_a_significant_drop_just_beyond_the_tolerance_regresses():
    # mean drop 0.03 against a 0.02 tolerance; queries move by +0.03, -0.03 or -0.09: the interval lies below
    # zero but reaches above -0.02. The drop exceeds the tolerance and is no noise: a regression (the old rule,
    # "the whole interval below -tolerance", let it pass).
    base = [0.8] * 60
    cur = [0.8 + d for d in [0.03, -0.03, -0.09] * 20]
    v = regression(cur, base, tolerance=0.02, metric="ndcg@10")
    assert v.diff == pytest.approx(-0.03) and v.ci_low < -0.02 < v.ci_high < 0
    assert v.regressed and "the interval excludes zero" in v.message


def test_a_significant_drop_within_the_tolerance_is_not_a_regression():
    base = [0.8] * 60
    cur = [0.8 - d for d in [0.0, 0.01, 0.02] * 20]  # mean drop 0.01, certainly real, but allowed
    v = regression(cur, base, tolerance=0.02, metric="ndcg@10")
    assert v.ci_high < 0 and not v.regressed and "no regression" in v.message


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
    assert regression(slow, fast, tolerance=1.0, metric="latency_ms").regressed  # latency up is worse
    assert not regression(fast, slow, tolerance=1.0, metric="latency_ms").regressed


def test_none_pairs_dropped_and_misaligned_rejected():
    ci = paired_bootstrap_ci([0.5, None, 0.7], [0.4, 0.9, None])
    assert ci.n == 1 and ci.mean_diff == pytest.approx(0.1)
    with pytest.raises(ValueError):
        paired_bootstrap_ci([0.1, 0.2], [0.1])


def test_compare_to_baseline():
    base = make_results(n_queries=40, seed=3)
    same = compare_to_baseline(base, base, tolerance=0.0, baseline_path="base.json")
    assert not same.regressed and {v.trial_id for v in same.verdicts} == {base.selected}
    assert {v.metric for v in same.verdicts} == {"ndcg@10", "recall@10", "p95_ms", "context_tokens"}

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


def _with_costs(results, trial_id, **costs):
    changed = results.model_copy(deep=True)
    trial = changed.trial(trial_id)
    trial.costs = trial.costs.model_copy(update=costs)
    return changed


def test_trial_costs_regress_on_a_rise_beyond_their_tolerance():
    base = make_results(n_queries=20, seed=5)
    sel = base.selected_trial
    p95, ctx = sel.costs.p95_ms, sel.costs.context_tokens

    slower = _with_costs(base, sel.id, p95_ms=p95 * 1.5)  # +50% against the default +20%
    cmp = compare_to_baseline(slower, base, tolerance=0.02)
    bad = [v for v in cmp.verdicts if v.regressed]
    assert cmp.regressed and [v.metric for v in bad] == ["p95_ms"]
    assert bad[0].diff == pytest.approx(p95 * 0.5) and bad[0].n_resamples == 0
    assert "+50.0%" in bad[0].message and "rise beyond tolerance" in bad[0].message
    assert not compare_to_baseline(slower, base, tolerance=0.02, cost_tolerance=0.6).regressed

    longer = _with_costs(base, sel.id, context_tokens=ctx * 1.1)  # +10%: within the default
    assert not compare_to_baseline(longer, base, tolerance=0.02).regressed
    assert compare_to_baseline(longer, base, tolerance=0.02, cost_tolerance=0.05).regressed
    cheaper = _with_costs(base, sel.id, p95_ms=p95 / 3, context_tokens=ctx / 3)  # costs going down never regress
    assert not compare_to_baseline(cheaper, base, tolerance=0.0, cost_tolerance=0.0).regressed

    only_quality = compare_to_baseline(slower, base, tolerance=0.02, metrics=["ndcg@10"])
    assert [v.metric for v in only_quality.verdicts] == ["ndcg@10"] and not only_quality.regressed
    only_latency = compare_to_baseline(slower, base, tolerance=0.02, metrics=["p95_ms"])
    assert [v.metric for v in only_latency.verdicts] == ["p95_ms"] and only_latency.regressed


def test_a_cost_measured_in_only_one_run_is_not_compared_and_a_cached_latency_is_named():
    base = make_results(n_queries=20, seed=5)
    sel = base.selected
    unmeasured = _with_costs(base, sel, p95_ms=None)
    assert "p95_ms" not in {v.metric for v in compare_to_baseline(unmeasured, base, tolerance=0.02).verdicts}
    cached = _with_costs(base, sel, latency_cached=True)
    p95 = next(v for v in compare_to_baseline(cached, base, tolerance=0.02).verdicts if v.metric == "p95_ms")
    assert "reused from cache in the current run" in p95.message
