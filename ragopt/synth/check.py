"""The rank-agreement check: does a generated set rank pipelines as a labelled set does?

The same sweep grid (chunk size x retriever x fusion: RRF, convex 0.3 and 0.7, at one top_k: comparing across K would inflate the
agreement) runs on both sets over the same corpus. Reported: Kendall tau (tau-b) between the two rankings
of configurations by nDCG@10; the regret of the generated set's choice (its best configuration, ties by id):
the labelled set's nDCG@10 of its own best minus that of the chosen one, with a paired bootstrap interval over
the labelled queries (an interval containing 0: the choice is as good as the best, within noise).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ragopt.errors import InputError

METRIC = "ndcg@10"
TOP_K = 10
CONVEX_ALPHAS = (0.3, 0.7)  # convex fusion's dense weight: BM25-leaning and dense-leaning, beside RRF


def grid(chunk_sizes: Sequence[int | str]) -> Any:
    from ragopt.eval.sweep import SweepConfig

    return SweepConfig(chunk_sizes=list(chunk_sizes), retrievers=["dense", "bm25", "hybrid"], fusions=["rrf", "convex"],
                       alphas=list(CONVEX_ALPHAS), top_k=[TOP_K])


def kendall_tau(a: dict[str, float], b: dict[str, float]) -> float | None:
    """Tau-b of the two scorings; None when it is undefined (every configuration scored alike on one side)."""
    import math

    from scipy.stats import kendalltau

    ids = sorted(a)
    tau = float(kendalltau([a[i] for i in ids], [b[i] for i in ids]).statistic)
    return None if math.isnan(tau) else tau


def best(scores: dict[str, float]) -> str:
    """The best configuration, ties broken by id (the order is total)."""
    return min(scores, key=lambda i: (-scores[i], i))


def agreement(labelled: Any, generated: Any) -> dict[str, Any]:
    """Tau and regret of the generated set's choice, from the two sweeps' results (the same grid)."""
    from ragopt.eval.bootstrap import paired_bootstrap_ci

    real = {t.id: t.metrics[METRIC] for t in labelled.trials}
    gen = {t.id: t.metrics[METRIC] for t in generated.trials}
    if set(real) != set(gen):
        raise InputError(f"the two sweeps ran different grids: {sorted(set(real) ^ set(gen))}", field="--check-against")
    chosen, top = best(gen), best(real)
    per_query = {t.id: t.per_query[METRIC] for t in labelled.trials}
    ci = paired_bootstrap_ci(per_query[top], per_query[chosen])
    return {"kendall_tau": kendall_tau(real, gen), "regret": real[top] - real[chosen], "regret_interval": [ci.low, ci.high],
            "selected": chosen, "labelled_best": top, "labelled_ndcg": real, "generated_ndcg": gen,
            "labelled_split_half_tau": split_half_tau(per_query)}


def split_half_tau(per_query: dict[str, Sequence[float]], draws: int = 200, seed: int = 0) -> dict[str, float] | None:
    """How far two halves of the labelled queries agree with each other: Kendall tau between the rankings of the
    configurations on two random halves, over `draws` seeded splits (median and 10th/90th percentiles). Two sets
    of real queries from the collection agree about this much: the scale a generated set's tau is read on.
    None: fewer than four queries, or every split undefined."""
    import numpy as np

    scores = {tid: np.asarray(v, dtype=float) for tid, v in per_query.items()}
    n = min(len(v) for v in scores.values())
    if n < 4:
        return None
    rng = np.random.default_rng(seed)
    taus = []
    for _ in range(draws):
        order = rng.permutation(n)
        a, b = order[: n // 2], order[n // 2:]
        # a query without a figure (None) is left out of its half's mean, as the bootstrap leaves it out
        tau = kendall_tau({t: float(np.nanmean(v[a])) for t, v in scores.items()},
                          {t: float(np.nanmean(v[b])) for t, v in scores.items()})
        if tau is not None:
            taus.append(tau)
    if not taus:
        return None
    p10, median, p90 = np.percentile(taus, [10, 50, 90])
    return {"median": round(float(median), 4), "p10": round(float(p10), 4), "p90": round(float(p90), 4)}


def check_against(labelled: Any, generated: Any, workspace: Path, chunk_sizes: Sequence[int | str] = ("whole",), *,
                  progress: bool = False) -> dict[str, Any]:
    """Sweep the grid on both sets and compare (see the module)."""
    from ragopt.eval.sweep import run_sweep

    if {d.id for d in labelled.documents} != {d.id for d in generated.documents}:
        raise InputError("the labelled and generated sets must share one corpus (the same document ids)",
                         field="--check-against")
    config = grid(chunk_sizes)
    real = run_sweep(labelled, config, workspace, progress=progress).results
    gen = run_sweep(generated, config, workspace, progress=progress).results
    return agreement(real, gen)


def lines(result: dict[str, Any]) -> list[str]:
    """The figures for people: tau, the choice and its regret, then every configuration on both sets."""
    lo, hi = result["regret_interval"]
    tau = "undefined (one set scores every configuration alike)" if result["kendall_tau"] is None else f"{result['kendall_tau']:.3f}"
    out = [f"Kendall tau {tau} over {len(result['labelled_ndcg'])} configurations ({METRIC}, top_k {TOP_K}); "
           f"the generated set selects {result['selected']} (labelled best {result['labelled_best']}): "
           f"regret {result['regret']:.4f} [{lo:.4f}, {hi:.4f}]"]
    if half := result.get("labelled_split_half_tau"):
        out.append(f"  two random halves of the labelled queries agree at Kendall tau {half['median']:.3f} "
                   f"(10th-90th percentile {half['p10']:.3f} to {half['p90']:.3f})")
    real, gen = result["labelled_ndcg"], result["generated_ndcg"]
    for tid in sorted(real, key=lambda i: (-real[i], i)):
        out.append(f"  {tid:<28} labelled {real[tid]:.4f}  generated {gen[tid]:.4f}")
    return out
