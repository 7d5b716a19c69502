"""Sweep outputs: results.json, results.csv, summary.md and a self-contained report.html.

The HTML needs no network and no JavaScript: CSS and the plots (SVG drawn by matplotlib, no pyplot state)
are inlined. Plots: Recall@K curves per chunker and retriever; quality against context tokens and against
p95 latency with the Pareto front marked; a per-query latency histogram when latencies are given.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragopt.eval.gates import fmt, is_cost, objective_key, parse_gates, quality_metric, rank_trials
from ragopt.eval.results import COST_NAMES, GateVerdict, SweepResults, Trial, TrialParams, measured

Latencies = Mapping[str, Sequence[float]]  # trial id -> per-query retrieval ms

_METRIC_ORDER = ("recall", "ndcg", "mrr", "precision", "hit", "span_recall")
_BASE_PARAMS = tuple(TrialParams.model_fields)
_TABLE_COSTS = ("context_tokens", "p50_ms", "p95_ms", "p99_ms", "n_chunks", "index_bytes", "index_build_s")
_COST_LABELS = {
    "context_tokens": "ctx tokens", "p50_ms": "p50 ms", "p95_ms": "p95 ms", "p99_ms": "p99 ms",
    "n_chunks": "chunks", "index_bytes": "index MB", "index_build_s": "build s",
}
_K_RE = re.compile(r"^(.*)@(\d+)$")


# ---------------------------------------------------------------------------------------------- helpers


def _metric_sort_key(name: str) -> tuple[int, str, int]:
    m = _K_RE.match(name)
    base, k = (m.group(1), int(m.group(2))) if m else (name, 0)
    order = _METRIC_ORDER.index(base) if base in _METRIC_ORDER else len(_METRIC_ORDER)
    return (order, base, k)


def _fmt_value(name: str, value: Any) -> str:
    x = measured(value)
    if x is None:
        return "" if value is None else str(value)
    if name == "index_bytes":
        return f"{x / 1e6:,.1f}"
    if name in ("context_tokens", "n_chunks"):
        return f"{x:,.0f}"
    if name.endswith("_ms") or name.endswith("_s"):
        return f"{x:.2f}" if x < 10 else f"{x:,.1f}"
    if isinstance(value, int):
        return str(value)
    return f"{x:.3f}"


def _extra_params(trials: Sequence[Trial]) -> list[str]:
    keys: list[str] = []
    for t in trials:
        for k in t.params.model_dump():
            if k not in _BASE_PARAMS and k not in keys:
                keys.append(k)
    return keys


def _retriever_label(p: TrialParams) -> str:
    label = p.retriever
    if p.fusion:
        label += f" · {p.fusion}"
    if p.alpha is not None and p.fusion != "rrf":
        label += f" α={p.alpha:g}"
    return label


def _config_label(t: Trial, extras: Sequence[str]) -> str:
    """Everything but the chunker and top_k: one line in the Recall@K plot, one colour in the scatters."""
    label = _retriever_label(t.params)
    dumped = t.params.model_dump()
    for k in extras:
        if dumped.get(k) is not None:
            label += f" {k}={dumped[k]}"
    return label


def _chunker_order(t: Trial) -> tuple[int, float, float]:
    p = t.params
    if p.chunker == "whole":
        return (1, 0, 0)
    return (0, p.chunk_size or 0, p.chunk_overlap or 0)


def _common_metrics(trials: Sequence[Trial]) -> list[str]:
    """Metrics every trial has (the documented @10 set), in a fixed order."""
    if not trials:
        return []
    common = set(trials[0].metrics)
    for t in trials[1:]:
        common &= set(t.metrics)
    return sorted(common, key=_metric_sort_key)


def _verdicts(results: SweepResults, t: Trial) -> list[GateVerdict]:
    return results.verdicts.get(t.id, [])


def _passed(results: SweepResults, t: Trial) -> bool:
    return all(v.passed for v in _verdicts(results, t))


def _ranked(results: SweepResults) -> list[Trial]:
    return rank_trials(results.trials, results.gates, verdicts=results.verdicts)


def plot_metric(results: SweepResults) -> str:
    """The quality metric of the scatter plots: ndcg@10 when the trials have it, else the objective's quality."""
    if results.trials and all("ndcg@10" in t.metrics for t in results.trials):
        return "ndcg@10"
    return quality_metric(results.gates)


def closest_trial(results: SweepResults) -> Trial | None:
    """The trial nearest to passing: fewest failed gates, then the smallest total shortfall (relative to each
    threshold), then the objective. Shown when no trial passes."""
    if not results.trials:
        return None
    quality = quality_metric(results.gates)

    def shortfall(v: GateVerdict) -> float:
        if v.passed:
            return 0.0
        if v.margin is None:
            return math.inf
        return -v.margin / abs(v.threshold) if v.threshold else -v.margin

    def key(t: Trial) -> tuple[int, float, tuple[float, float, float, str]]:
        vs = _verdicts(results, t)
        return (sum(not v.passed for v in vs), sum(shortfall(v) for v in vs), objective_key(t, quality))

    return min(results.trials, key=key)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (lower cost x, higher quality y), by cost.
    Of identical points only one is kept."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front: list[int] = []
    best = -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


# ---------------------------------------------------------------------------------------------- JSON / CSV


def csv_rows(results: SweepResults) -> tuple[list[str], list[dict[str, Any]]]:
    """One flat row per trial (objective order): id, selected, passed, failed_gates, params, metrics, costs."""
    trials = _ranked(results)
    params: list[str] = []
    metrics: list[str] = []
    costs: list[str] = list(COST_NAMES)
    for t in trials:
        for k in t.params.model_dump():
            if k not in params:
                params.append(k)
        for k in t.metrics:
            if k not in metrics:
                metrics.append(k)
        for k in t.costs.model_dump():
            if k not in costs:
                costs.append(k)
    metrics.sort(key=_metric_sort_key)
    header = ["rank", "id", "selected", "passed", "failed_gates", *params, *metrics, *costs]
    rows = []
    for rank, t in enumerate(trials, start=1):
        row: dict[str, Any] = {
            "rank": rank,
            "id": t.id,
            "selected": t.id == results.selected,
            "passed": _passed(results, t),
            "failed_gates": "; ".join(v.message for v in _verdicts(results, t) if not v.passed),
        }
        row.update(t.params.model_dump())
        row.update(t.metrics)
        row.update(t.costs.model_dump())
        rows.append({k: ("" if row.get(k) is None else row[k]) for k in header})
    return header, rows


def write_csv(results: SweepResults, path: str | Path) -> Path:
    path = Path(path)
    header, rows = csv_rows(results)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows(rows)
    return path


# ---------------------------------------------------------------------------------------------- Markdown


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


def _table_columns(results: SweepResults) -> tuple[list[str], list[str], list[str]]:
    trials = results.trials
    extras = _extra_params(trials)
    metrics = _common_metrics(trials)
    costs = [c for c in _TABLE_COSTS if any(measured(getattr(t.costs, c, None)) is not None for t in trials)]
    return extras, metrics, costs


_SUMMARY_COSTS = ("context_tokens", "p95_ms")  # what the objective reads


def _summary_columns(results: SweepResults) -> tuple[list[str], list[str], list[str]]:
    """The summary's compact columns: the swept params beyond the base ones, the objective's quality metric
    and the gates' metrics, and the costs the objective and the gates read. Every column is in results.csv."""
    trials = results.trials
    gated = [g.metric for g in parse_gates(results.gates)]
    metrics = [quality_metric(results.gates), *(m for m in gated if not is_cost(m))]
    costs = [*_SUMMARY_COSTS, *(m for m in gated if is_cost(m))]

    def present(names: list[str]) -> list[str]:
        return [n for n in dict.fromkeys(names) if any(measured(t.values().get(n)) is not None for t in trials)]

    return _extra_params(trials), present(metrics), present(costs)


def render_summary(results: SweepResults) -> str:
    """summary.md: the selected trial, the objective, gate verdicts, and every trial in objective order."""
    ds = results.dataset
    out = [
        "# ragopt sweep summary",
        "",
        f"Dataset **{ds.name}** ({ds.n_documents:,} documents, {ds.n_queries:,} queries; "
        f"fingerprint `{ds.fingerprint}`), {len(results.trials)} trials, {results.created_at}.",
        "",
        f"**Objective:** {results.objective}.",
        "",
        "**Gates:** " + (", ".join(f"`{g}`" for g in results.gates) if results.gates else "none"),
        "",
    ]
    sel = results.selected_trial
    ranked = _ranked(results)
    if sel is not None:
        out += [f"## Selected: `{sel.id}`", "", _md_params(sel), ""]
        shown = sel
    else:
        out += ["## No trial passes every gate", ""]
        shown = closest_trial(results)
        if shown is not None:
            out += [f"Closest to passing: `{shown.id}` ({_md_params(shown)}).", ""]
    if shown is not None and _verdicts(results, shown):
        out += ["| gate | observed | result |", "|---|---:|---|"]
        for v in _verdicts(results, shown):
            obs = "not measured" if v.observed is None else fmt(v.observed)
            out.append(f"| `{v.gate}` | {obs} | {'pass' if v.passed else 'FAIL'}: {_md_escape(v.message)} |")
        out.append("")
    if results.baseline is not None:
        b = results.baseline
        out += [
            f"## Baseline: {'REGRESSION' if b.regressed else 'no regression'}",
            "",
            f"Against `{b.path}`. Per-query metrics: a regression is a mean drop beyond {fmt(b.tolerance)} whose "
            "paired bootstrap interval excludes zero. Trial costs (p95_ms, context_tokens): a rise beyond the "
            "share of the baseline each verdict states.",
            "",
        ]
        out += [f"- {'**regressed**' if v.regressed else 'ok'} `{v.trial_id}` {_md_escape(v.message)}"
                for v in b.verdicts]
        out.append("")

    extras, metrics, costs = _summary_columns(results)
    head = ["#", "trial", "chunker", "retriever", "top_k", *extras, *metrics,
            *(_COST_LABELS.get(c, c) for c in costs), "gates"]
    out += ["## Trials (objective order, passing first)", "",
            "Key columns only: every metric and cost of every trial is in `results.csv`.", "",
            "| " + " | ".join(head) + " |",
            "|" + "|".join("---:" if i == 0 or 4 <= i < len(head) - 1 else "---" for i in range(len(head))) + "|"]
    for rank, t in enumerate(ranked, start=1):
        dumped, values = t.params.model_dump(), t.values()
        failed = [v.gate for v in _verdicts(results, t) if not v.passed]
        name = f"**{t.id}**" if t.id == results.selected else t.id
        cells = [
            str(rank), name, t.params.chunker, _retriever_label(t.params), str(t.params.top_k),
            *("" if dumped.get(k) is None else str(dumped[k]) for k in extras),
            *(_fmt_value(n, values.get(n)) for n in (*metrics, *costs)),
            "pass" if not failed else "fails " + ", ".join(f"`{g}`" for g in failed),
        ]
        out.append("| " + " | ".join(_md_escape(c) for c in cells) + " |")
    out.append("")
    failing = [t for t in ranked if not _passed(results, t)]
    if failing:
        out += ["## Why the other trials failed", ""]
        for t in failing:
            msgs = "; ".join(v.message for v in _verdicts(results, t) if not v.passed)
            out.append(f"- `{t.id}`: {_md_escape(msgs)}")
        out.append("")
    return "\n".join(out)


def _md_params(t: Trial) -> str:
    p = t.params
    bits = [f"chunker {p.chunker}", f"retriever {_retriever_label(p)}", f"top_k {p.top_k}"]
    bits += [f"{k} {v}" for k, v in p.model_dump().items() if k not in _BASE_PARAMS and v is not None]
    return ", ".join(bits)


# ---------------------------------------------------------------------------------------------- plots


def _svg(fig: Any, salt: str) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": salt, "svg.fonttype": "path"}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: inline SVG in HTML5


def _style_axes(ax: Any) -> None:
    ax.grid(True, color="#e5e7eb", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_color("#9ca3af")
    ax.tick_params(colors="#374151", labelsize=9)


def _maybe_log(ax: Any, values: Sequence[float]) -> None:
    """A log x axis when the values span 20x or more, labelled 1, 2, 5, 10, 20, ... in plain numbers."""
    from matplotlib.ticker import LogLocator, NullFormatter

    pos = [v for v in values if v > 0]
    if pos and max(pos) / min(pos) >= 20:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(lambda x, _pos: f"{x:,.0f}" if x >= 1 else f"{x:g}")
        ax.xaxis.set_minor_formatter(NullFormatter())


_COLORS = ["#2563eb", "#ea580c", "#16a34a", "#9333ea", "#dc2626", "#0891b2", "#ca8a04", "#db2777", "#4b5563"]
_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "h"]


def _recall_points(group: Sequence[Trial]) -> dict[int, float]:
    """recall@K for every K a trial of the group was scored at, within its top_k (deeper Ks saw nothing more)."""
    pts: dict[int, float] = {}
    for t in sorted(group, key=lambda t: t.params.top_k):
        for name, value in t.metrics.items():
            m = _K_RE.match(name)
            v = measured(value)
            if m and m.group(1) == "recall" and v is not None and int(m.group(2)) <= t.params.top_k:
                pts.setdefault(int(m.group(2)), v)
    return pts


def plot_recall_curves(results: SweepResults) -> str | None:
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    trials = results.trials
    extras = _extra_params(trials)
    chunkers: list[str] = []
    for t in sorted(trials, key=_chunker_order):
        if t.params.chunker not in chunkers:
            chunkers.append(t.params.chunker)
    configs = sorted({_config_label(t, extras) for t in trials})
    color = {c: _COLORS[i % len(_COLORS)] for i, c in enumerate(configs)}
    curves: dict[str, dict[str, dict[int, float]]] = {}
    for ch in chunkers:
        for cfg in configs:
            group = [t for t in trials if t.params.chunker == ch and _config_label(t, extras) == cfg]
            pts = _recall_points(group)
            if pts:
                curves.setdefault(ch, {})[cfg] = pts
    if not curves:
        return None
    chunkers = [c for c in chunkers if c in curves]
    ncols = min(4, len(chunkers))
    nrows = math.ceil(len(chunkers) / ncols)
    fig = Figure(figsize=(max(7.0, 2.9 * ncols + 0.6), 2.7 * nrows + 0.7) if ncols > 1 else (7.0, 3.6))
    axes = fig.subplots(nrows, ncols, sharey=True, squeeze=False)
    all_k = sorted({k for c in curves.values() for pts in c.values() for k in pts})
    recall_gates = [(g, v.threshold) for g, v in _gate_thresholds(results).items() if g.startswith("recall@")]
    for ax in axes.flat[len(chunkers):]:
        ax.set_visible(False)
    for ax, ch in zip(axes.flat, chunkers):
        _style_axes(ax)
        for cfg, pts in curves[ch].items():
            ks = sorted(pts)
            ax.plot(ks, [pts[k] for k in ks], marker="o", markersize=3.5, linewidth=1.6, color=color[cfg], label=cfg)
        for name, thr in recall_gates:
            ax.axhline(thr, color="#dc2626", linestyle="--", linewidth=1)
            ax.annotate(f"gate {name}≥{thr:g}", (0.02, thr), xycoords=("axes fraction", "data"),
                        xytext=(0, 3), textcoords="offset points", fontsize=7.5, color="#dc2626")
        title = "whole document" if ch == "whole" else f"chunks {ch} tokens"
        ax.set_title(title, fontsize=10, color="#111827")
        _maybe_log(ax, all_k)
        if ax.get_xscale() == "log":
            ax.xaxis.set_major_locator(FixedLocator(all_k))
            ax.xaxis.set_major_formatter(lambda x, _pos: f"{x:g}")
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("top_k", fontsize=9)
    for row in axes:
        row[0].set_ylabel("recall@top_k", fontsize=9)
    axes.flat[0].set_ylim(0, 1.02)
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), frameon=False, fontsize=9,
               bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.08 if nrows == 1 else 0.05, 1, 1))
    return _svg(fig, "recall")


def _gate_thresholds(results: SweepResults) -> dict[str, GateVerdict]:
    """One representative verdict per gated metric (for its threshold), from any trial."""
    out: dict[str, GateVerdict] = {}
    for vs in results.verdicts.values():
        for v in vs:
            out.setdefault(v.metric, v)
    return out


def plot_quality_vs_cost(results: SweepResults) -> str | None:
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    quality = plot_metric(results)
    trials = [t for t in results.trials if measured(t.metrics.get(quality)) is not None]
    panels = [
        (c, lab)
        for c, lab in (("context_tokens", "context tokens (mean, top_k chunks)"),
                       ("p95_ms", "p95 retrieval latency (ms)"))
        if any(measured(getattr(t.costs, c)) is not None for t in trials)
    ]
    if not trials or not panels:
        return None
    extras = _extra_params(trials)
    configs = sorted({_config_label(t, extras) for t in trials})
    color = {c: _COLORS[i % len(_COLORS)] for i, c in enumerate(configs)}
    chunkers: list[str] = []
    for t in sorted(trials, key=_chunker_order):
        if t.params.chunker not in chunkers:
            chunkers.append(t.params.chunker)
    marker = {c: _MARKERS[i % len(_MARKERS)] for i, c in enumerate(chunkers)}
    gates = _gate_thresholds(results)
    fig = Figure(figsize=(5.6 * len(panels) + 0.4, 4.6))
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (cost, xlabel) in zip(axes, panels):
        _style_axes(ax)
        pts = [(t, measured(getattr(t.costs, cost)), measured(t.metrics.get(quality))) for t in trials]
        pts = [(t, x, y) for t, x, y in pts if x is not None and y is not None]
        for t, x, y in pts:
            ok = _passed(results, t)
            c = color[_config_label(t, extras)]
            ax.scatter([x], [y], marker=marker[t.params.chunker], s=34, linewidths=1.2, zorder=3,
                       facecolors=c if ok else "white", edgecolors=c, alpha=0.95 if ok else 0.8)
        front = pareto_front([(x, y) for _, x, y in pts])
        fx = [pts[i][1] for i in front]
        fy = [pts[i][2] for i in front]
        ax.plot(fx, fy, drawstyle="steps-post", color="#111827", linewidth=1.3, zorder=2, alpha=0.8)
        ax.scatter(fx, fy, s=120, facecolors="none", edgecolors="#111827", linewidths=1.0, zorder=4)
        sel = next(((t, x, y) for t, x, y in pts if t.id == results.selected), None)
        if sel is not None:
            ax.scatter([sel[1]], [sel[2]], marker="*", s=320, color="#facc15", edgecolors="#111827",
                       linewidths=0.9, zorder=5)
            ax.annotate("selected", (sel[1], sel[2]), xytext=(10, 8), textcoords="offset points", fontsize=8.5,
                        color="#111827", fontweight="bold", zorder=6,
                        bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.85})
        if cost in gates:
            ax.axvline(gates[cost].threshold, color="#dc2626", linestyle="--", linewidth=1)
        if quality in gates:
            ax.axhline(gates[quality].threshold, color="#dc2626", linestyle="--", linewidth=1)
        _maybe_log(ax, [x for _, x, _ in pts])
        ax.margins(x=0.05, y=0.08)
        ax.set_xlabel(xlabel, fontsize=9)
    axes[0].set_ylabel(quality, fontsize=9)
    handles = [Line2D([], [], linestyle="", marker="o", color=color[c], label=c) for c in configs]
    handles += [Line2D([], [], linestyle="", marker=marker[c], color="#6b7280",
                       label="whole doc" if c == "whole" else f"chunks {c}") for c in chunkers]
    handles += [
        Line2D([], [], linestyle="", marker="o", color="#6b7280", markerfacecolor="white", label="fails a gate"),
        Line2D([], [], color="#111827", marker="o", markerfacecolor="none", markersize=9, label="Pareto front"),
        Line2D([], [], linestyle="", marker="*", markersize=13, color="#facc15", markeredgecolor="#111827",
               label="selected"),
        Line2D([], [], color="#dc2626", linestyle="--", label="gate threshold"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), frameon=False, fontsize=8.5,
               bbox_to_anchor=(0.5, -0.03))
    rows = math.ceil(len(handles) / 6)
    fig.tight_layout(rect=(0, 0.07 * rows, 1, 1))
    return _svg(fig, "pareto")


def plot_latency_histogram(results: SweepResults, latencies: Latencies, max_trials: int = 6) -> str | None:
    from matplotlib.figure import Figure

    ranked = [t for t in _ranked(results) if latencies.get(t.id)]
    if not ranked:
        return None
    chosen = [t for t in ranked if t.id == results.selected]
    chosen += [t for t in ranked if t.id != results.selected][: max_trials - len(chosen)]
    values = [v for t in chosen for v in latencies[t.id] if v > 0]
    if not values:
        return None
    lo, hi = min(values), max(values)
    log = hi / lo >= 20
    if log:
        bins = [lo * (hi / lo) ** (i / 40) for i in range(41)]
    else:
        bins = [lo + (hi - lo) * i / 40 for i in range(41)] if hi > lo else 10
    fig = Figure(figsize=(11, 3.4))
    ax = fig.subplots()
    _style_axes(ax)
    for i, t in enumerate(chosen):
        lab = f"{t.id}{' (selected)' if t.id == results.selected else ''}"
        ax.hist(latencies[t.id], bins=bins, histtype="step", linewidth=2.0 if i == 0 else 1.3,
                color=_COLORS[i % len(_COLORS)], label=lab)
    gate = _gate_thresholds(results).get("p95_ms")
    if gate is not None:
        ax.axvline(gate.threshold, color="#dc2626", linestyle="--", linewidth=1,
                   label=f"gate p95_ms≤{gate.threshold:g}")
    if log:
        _maybe_log(ax, values)
    ax.set_xlabel("retrieval latency per query (ms)", fontsize=9)
    ax.set_ylabel("queries", fontsize=9)
    ax.legend(frameon=False, fontsize=8.5, loc="upper right")
    fig.tight_layout()
    return _svg(fig, "latency")


# ---------------------------------------------------------------------------------------------- HTML

_CSS = """
:root { --fg:#111827; --muted:#6b7280; --line:#e5e7eb; --ok:#15803d; --bad:#b91c1c; --okbg:#f0fdf4; --badbg:#fef2f2; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: var(--fg);
       background: #f9fafb; }
main { max-width: 1240px; margin: 0 auto; padding: 28px 28px 60px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 10px; padding-bottom: 6px; border-bottom: 1px solid var(--line); }
.meta { color: var(--muted); margin: 0 0 18px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 16px 20px; margin: 14px 0; }
.banner { border-left: 6px solid var(--ok); background: var(--okbg); }
.banner.nopass { border-left-color: var(--bad); background: var(--badbg); }
.banner h2 { border: 0; margin: 0 0 6px; padding: 0; }
.kv { display: flex; flex-wrap: wrap; gap: 8px 22px; margin: 8px 0 0; }
.kv div { min-width: 110px; } .kv b { display: block; font-size: 17px; font-variant-numeric: tabular-nums; }
.kv span { color: var(--muted); font-size: 12px; }
.objective { color: #374151; }
code { font: 12.5px/1.3 "DejaVu Sans Mono", ui-monospace, monospace; background: #f3f4f6; padding: 1px 4px;
       border-radius: 4px; }
table { border-collapse: collapse; width: 100%; background: #fff; font-size: 12.5px; }
table.trials { font-size: 12px; }
th, td { padding: 4px 7px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: baseline; }
th { background: #f3f4f6; font-weight: 600; position: sticky; top: 0; white-space: nowrap; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.failed td { color: #6b7280; }
tr.selected td { background: #fef9c3; color: var(--fg); font-weight: 600; }
.pass { color: var(--ok); font-weight: 600; } .fail { color: var(--bad); font-weight: 600; }
.why { color: var(--bad); font-size: 11.5px; }
td.id { font-family: "DejaVu Sans Mono", ui-monospace, monospace; font-size: 11.5px; white-space: nowrap; }
td.nw { white-space: nowrap; }
table.narrow { width: auto; min-width: 50%; border: 1px solid var(--line); }
.plot { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 12px; margin: 12px 0; }
.plot svg { max-width: 100%; height: auto; display: block; margin: 0 auto; }
.plot p { margin: 0 0 6px; color: var(--muted); font-size: 12.5px; }
.tablewrap { overflow-x: auto; border: 1px solid var(--line); border-radius: 10px; }
footer { margin-top: 36px; color: var(--muted); font-size: 12px; }
pre { white-space: pre-wrap; font-size: 12px; }
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _verdict_table(verdicts: Sequence[GateVerdict]) -> str:
    rows = []
    for v in verdicts:
        obs = "not measured" if v.observed is None else fmt(v.observed)
        cls, word = ("pass", "pass") if v.passed else ("fail", "FAIL")
        rows.append(
            f"<tr><td><code>{_e(v.gate)}</code></td><td class='n'>{_e(obs)}</td>"
            f"<td class='n'>{_e(v.op)} {_e(fmt(v.threshold))}</td>"
            f"<td><span class='{cls}'>{word}</span></td><td>{_e(v.message)}</td></tr>"
        )
    return ("<table><tr><th>gate</th><th class='n'>observed</th><th class='n'>needs</th><th>result</th>"
            "<th>verdict</th></tr>" + "".join(rows) + "</table>")


def _kv(t: Trial, quality: str) -> str:
    items = [(quality, t.metrics.get(quality))]
    items += [(m, t.metrics.get(m)) for m in ("recall@10", "mrr@10", "span_recall@10")
              if m != quality and m in t.metrics]
    items += [(c, getattr(t.costs, c)) for c in ("context_tokens", "p95_ms") if getattr(t.costs, c) is not None]
    return "<div class='kv'>" + "".join(
        f"<div><b>{_e(_fmt_value(k, v))}</b><span>{_e(_COST_LABELS.get(k, k))}</span></div>" for k, v in items
    ) + "</div>"


_HTML_METRICS = ("recall@10", "ndcg@10", "mrr@10", "span_recall@10")
_HTML_COSTS = ("context_tokens", "p95_ms")


def _short_verdict(v: GateVerdict) -> str:
    if v.observed is None:
        return f"{v.metric} not measured"
    if v.margin == 0:
        return f"{v.metric} at threshold"
    return f"{v.metric} {'short' if v.op in ('>=', '>') else 'over'} by {fmt(abs(v.margin or 0))}"


def _trials_table(results: SweepResults, ranked: Sequence[Trial]) -> str:
    """The HTML table: a compact column set (every column is in results.csv)."""
    extras, common, _ = _table_columns(results)
    gated = [g.metric for vs in results.verdicts.values() for g in vs]
    metrics = [m for m in common if m in _HTML_METRICS or (m in gated and not m.endswith(("_ms", "_tokens")))]
    costs = [c for c in _HTML_COSTS if any(measured(getattr(t.costs, c)) is not None for t in results.trials)]
    head = ["#", "trial", "chunker", "retriever", "top_k", *extras, *metrics, *(_COST_LABELS[c] for c in costs),
            "gates"]
    numeric = {0, 4, *range(5 + len(extras), 5 + len(extras) + len(metrics) + len(costs))}
    out = ["<div class='tablewrap'><table class='trials'><tr>"]
    out += [f"<th class='n'>{_e(h)}</th>" if i in numeric else f"<th>{_e(h)}</th>" for i, h in enumerate(head)]
    out.append("</tr>")
    for rank, t in enumerate(ranked, start=1):
        ok = _passed(results, t)
        cls = "selected" if t.id == results.selected else ("" if ok else "failed")
        dumped = t.params.model_dump()
        failed = [v for v in _verdicts(results, t) if not v.passed]
        gate_cell = ("<span class='pass'>pass</span>" if not failed else
                     "<span class='why'>" + "<br>".join(_e(_short_verdict(v)) for v in failed) + "</span>")
        cells = [
            f"<td class='n'>{rank}</td>", f"<td class='id'>{_e(t.id)}</td>", f"<td>{_e(t.params.chunker)}</td>",
            f"<td class='nw'>{_e(_retriever_label(t.params))}</td>", f"<td class='n'>{t.params.top_k}</td>",
            *(f"<td>{_e('' if dumped.get(k) is None else dumped[k])}</td>" for k in extras),
            *(f"<td class='n'>{_e(_fmt_value(m, t.metrics.get(m)))}</td>" for m in metrics),
            *(f"<td class='n'>{_e(_fmt_value(c, getattr(t.costs, c, None)))}</td>" for c in costs),
            f"<td class='nw'>{gate_cell}</td>",
        ]
        out.append(f"<tr class='{cls}'>" + "".join(cells) + "</tr>")
    out.append("</table></div>")
    return "".join(out)


def _index_table(results: SweepResults) -> str | None:
    """One row per distinct index (chunker x retriever): chunks, size, build time."""
    rows: dict[tuple[str, str], Trial] = {}
    for t in sorted(results.trials, key=_chunker_order):
        rows.setdefault((t.params.chunker, _retriever_label(t.params)), t)
    cols = [c for c in ("n_chunks", "index_bytes", "index_build_s")
            if any(measured(getattr(t.costs, c)) is not None for t in rows.values())]
    if not cols:
        return None
    head = "".join(f"<th class='n'>{_e(_COST_LABELS[c])}</th>" for c in cols)
    body = "".join(
        f"<tr><td>{_e(ch)}</td><td>{_e(ret)}</td>"
        + "".join(f"<td class='n'>{_e(_fmt_value(c, getattr(t.costs, c)))}</td>" for c in cols) + "</tr>"
        for (ch, ret), t in rows.items()
    )
    return f"<table class='narrow'><tr><th>chunker</th><th>retriever</th>{head}</tr>{body}</table>"


def render_html(results: SweepResults, latencies: Latencies | None = None) -> str:
    ds = results.dataset
    ranked = _ranked(results)
    quality = plot_metric(results)
    sel = results.selected_trial
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>ragopt sweep: {_e(ds.name)}</title><style>{_CSS}</style></head><body><main>",
        "<h1>ragopt sweep report</h1>",
        f"<p class='meta'>Dataset <b>{_e(ds.name)}</b> · {ds.n_documents:,} documents · {ds.n_queries:,} queries · "
        f"{len(results.trials)} trials · {_e(results.created_at)}</p>",
    ]
    gates_line = ", ".join(f"<code>{_e(g)}</code>" for g in results.gates) or "none"
    if sel is not None:
        parts.append(
            f"<section class='card banner'><h2>Selected: <code>{_e(sel.id)}</code></h2>"
            f"<div>{_e(_md_params(sel))}</div>{_kv(sel, quality)}</section>"
        )
        shown, shown_title = sel, "Gate verdicts for the selected trial"
    else:
        closest = closest_trial(results)
        parts.append(
            "<section class='card banner nopass'><h2>No trial passes every gate</h2>"
            + (f"<div>Closest to passing: <code>{_e(closest.id)}</code> ({_e(_md_params(closest))})</div>"
               f"{_kv(closest, quality)}" if closest is not None else "")
            + "</section>"
        )
        shown, shown_title = closest, "Gate verdicts for the closest trial"
    parts.append(f"<p class='objective'><b>Objective:</b> {_e(results.objective)}. <b>Gates:</b> {gates_line}</p>")
    if shown is not None and _verdicts(results, shown):
        parts.append(f"<h2>{shown_title}</h2>{_verdict_table(_verdicts(results, shown))}")
    if results.baseline is not None:
        b = results.baseline
        cls = "fail" if b.regressed else "pass"
        boot = next((v for v in b.verdicts if v.n_resamples), None)
        boot_note = f" ({boot.n_resamples} resamples, {boot.confidence:.0%} CI of current − baseline)" if boot else ""
        rows = "".join(
            f"<tr><td><code>{_e(v.trial_id)}</code></td><td>{_e(v.metric)}</td><td class='n'>{v.baseline_mean:.3f}</td>"
            f"<td class='n'>{v.current_mean:.3f}</td><td class='n'>{v.diff:+.3f}</td>"
            + (f"<td class='n'>[{v.ci_low:+.3f}, {v.ci_high:+.3f}]</td>" if v.n_resamples else "<td class='n'>(one figure)</td>")
            + ("<td><span class='fail'>REGRESSED</span></td></tr>" if v.regressed
               else "<td><span class='pass'>ok</span></td></tr>")
            for v in b.verdicts
        )
        parts.append(
            f"<h2>Baseline comparison: <span class='{cls}'>"
            f"{'regression' if b.regressed else 'no regression'}</span></h2>"
            f"<p class='meta'>Against <code>{_e(b.path)}</code>. Per-query metrics regress on a mean drop beyond "
            f"{_e(fmt(b.tolerance))} whose paired bootstrap interval excludes zero{boot_note}; trial costs on a rise "
            "beyond their tolerance "
            "(a share of the baseline).</p>"
            "<table><tr><th>trial</th><th>metric</th><th class='n'>baseline</th><th class='n'>current</th>"
            f"<th class='n'>diff</th><th class='n'>CI</th><th>result</th></tr>{rows}</table>"
        )

    plots = [
        ("Recall@K by chunk size", "Recall at each top_k, one line per retriever, one panel per chunker. "
         "Documents are judged once each, so chunk sizes are comparable.", plot_recall_curves(results)),
        (f"{quality} against cost", "Filled markers pass every gate, hollow ones fail one; the dark steps join "
         "the Pareto front (nothing is both cheaper and better); the star is the selected trial.",
         plot_quality_vs_cost(results)),
    ]
    if latencies:
        plots.append(("Per-query retrieval latency", "The selected trial and the next trials in objective order.",
                      plot_latency_histogram(results, latencies)))
    for title, caption, svg in plots:
        if svg is not None:
            parts.append(f"<h2>{_e(title)}</h2><div class='plot'><p>{_e(caption)}</p>{svg}</div>")

    parts.append("<h2>All trials</h2><p class='meta'>In objective order, passing trials first; "
                 "results.csv has every metric and cost.</p>")
    parts.append(_trials_table(results, ranked))
    index_table = _index_table(results)
    if index_table is not None:
        parts.append(f"<h2>Indexes</h2>{index_table}")

    v = results.versions
    models = ", ".join(f"{_e(k)}: {_e(m.name)} <code>{_e(m.fingerprint)}</code>" for k, m in results.models.items())
    pkgs = ", ".join(f"{_e(k)} {_e(val)}" for k, val in v.packages.items())
    parts.append(
        "<footer><p>"
        f"Dataset <code>{_e(ds.path)}</code> fingerprint <code>{_e(ds.fingerprint)}</code>. "
        f"{('Models: ' + models + '. ') if models else ''}"
        f"ragopt {_e(v.ragopt)}, Python {_e(v.python)}{('; ' + pkgs) if pkgs else ''}.</p>"
        f"<details><summary>Search space</summary><pre>{_e(json.dumps(results.search_space, indent=2))}</pre>"
        "</details></footer></main></body></html>"
    )
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------- all outputs


def write_outputs(
    results: SweepResults, out_dir: str | Path, latencies: Latencies | None = None
) -> dict[str, Path]:
    """Write results.json, results.csv, summary.md and report.html into `out_dir` (created if needed)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": results.save(out / "results.json"),
        "csv": write_csv(results, out / "results.csv"),
        "summary": out / "summary.md",
        "html": out / "report.html",
    }
    paths["summary"].write_text(render_summary(results), encoding="utf-8")
    paths["html"].write_text(render_html(results, latencies), encoding="utf-8")
    return paths


__all__ = [
    "closest_trial", "csv_rows", "pareto_front", "plot_latency_histogram", "plot_quality_vs_cost", "plot_recall_curves",
    "render_html", "render_summary", "write_csv", "write_outputs",
]
