"""The report's figures, as inline SVG drawn by matplotlib (no pyplot state): Recall@K curves per chunker and
retriever; quality against context tokens and against p95 latency with the Pareto front marked; a per-query
latency histogram."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

from ragopt.eval.report_common import (
    _K_RE, Latencies, _chunker_order, _config_label, _extra_params, _gate_thresholds, _passed, _ranked, pareto_front,
    plot_metric,
)
from ragopt.eval.results import SweepResults, Trial, measured


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


def _chunkers_in_order(trials: Sequence[Trial]) -> list[str]:
    """Each chunker once: by chunk size, then overlap, whole documents last."""
    chunkers: list[str] = []
    for t in sorted(trials, key=_chunker_order):
        if t.params.chunker not in chunkers:
            chunkers.append(t.params.chunker)
    return chunkers


def _recall_curves(trials: Sequence[Trial], chunkers: Sequence[str], configs: Sequence[str],
                   extras: Sequence[str]) -> dict[str, dict[str, dict[int, float]]]:
    """chunker -> configuration -> its recall@K points, for the groups scored at some K."""
    curves: dict[str, dict[str, dict[int, float]]] = {}
    for ch in chunkers:
        for cfg in configs:
            group = [t for t in trials if t.params.chunker == ch and _config_label(t, extras) == cfg]
            pts = _recall_points(group)
            if pts:
                curves.setdefault(ch, {})[cfg] = pts
    return curves


def _draw_recall_panel(ax: Any, chunker: str, curves: dict[str, dict[int, float]], color: dict[str, str],
                       recall_gates: Sequence[tuple[str, float]], all_k: Sequence[int]) -> None:
    """One chunker's panel: a line per configuration, the recall gates, and on a log axis a tick at every K."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    _style_axes(ax)
    for cfg, pts in curves.items():
        ks = sorted(pts)
        ax.plot(ks, [pts[k] for k in ks], marker="o", markersize=3.5, linewidth=1.6, color=color[cfg], label=cfg)
    for name, thr in recall_gates:
        ax.axhline(thr, color="#dc2626", linestyle="--", linewidth=1)
        ax.annotate(f"gate {name}≥{thr:g}", (0.02, thr), xycoords=("axes fraction", "data"),
                    xytext=(0, 3), textcoords="offset points", fontsize=7.5, color="#dc2626")
    title = "whole document" if chunker == "whole" else f"chunks {chunker} tokens"
    ax.set_title(title, fontsize=10, color="#111827")
    _maybe_log(ax, all_k)
    if ax.get_xscale() == "log":
        ax.xaxis.set_major_locator(FixedLocator(all_k))
        ax.xaxis.set_major_formatter(lambda x, _pos: f"{x:g}")
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("top_k", fontsize=9)


def _legend_entries(axes: Any) -> tuple[list[Any], list[str]]:
    """Every panel's legend handles, each label once, for one legend under the figure."""
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    return handles, labels


def plot_recall_curves(results: SweepResults) -> str | None:
    from matplotlib.figure import Figure

    trials = results.trials
    extras = _extra_params(trials)
    chunkers = _chunkers_in_order(trials)
    configs = sorted({_config_label(t, extras) for t in trials})
    color = {c: _COLORS[i % len(_COLORS)] for i, c in enumerate(configs)}
    curves = _recall_curves(trials, chunkers, configs, extras)
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
        _draw_recall_panel(ax, ch, curves[ch], color, recall_gates, all_k)
    for row in axes:
        row[0].set_ylabel("recall@top_k", fontsize=9)
    axes.flat[0].set_ylim(0, 1.02)
    handles, labels = _legend_entries(axes)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), frameon=False, fontsize=9,
               bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.08 if nrows == 1 else 0.05, 1, 1))
    return _svg(fig, "recall")


def _mark_front_and_selected(ax: Any, results: SweepResults, pts: Sequence[tuple[Trial, float, float]]) -> None:
    """The Pareto front as dark steps with ringed points, and a star on the selected trial."""
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


def _quality_cost_legend(configs: Sequence[str], chunkers: Sequence[str], color: dict[str, str],
                         marker: dict[str, str]) -> list[Any]:
    """A colour per configuration, a marker per chunker, then what the fills, rings, star and dashes mean."""
    from matplotlib.lines import Line2D

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
    return handles


def plot_quality_vs_cost(results: SweepResults) -> str | None:
    from matplotlib.figure import Figure

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
    chunkers = _chunkers_in_order(trials)
    marker = {c: _MARKERS[i % len(_MARKERS)] for i, c in enumerate(chunkers)}
    gates = _gate_thresholds(results)
    fig = Figure(figsize=(5.6 * len(panels) + 0.4, 4.6))
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (cost, xlabel) in zip(axes, panels):
        _style_axes(ax)
        pts = [(t, measured(getattr(t.costs, cost)), measured(t.metrics.get(quality))) for t in trials]
        pts = [(t, x, y) for t, x, y in pts if x is not None and y is not None]
        for t, x, y in pts:  # filled where the trial passes every gate, hollow where it fails one
            ok = _passed(results, t)
            c = color[_config_label(t, extras)]
            ax.scatter([x], [y], marker=marker[t.params.chunker], s=34, linewidths=1.2, zorder=3,
                       facecolors=c if ok else "white", edgecolors=c, alpha=0.95 if ok else 0.8)
        _mark_front_and_selected(ax, results, pts)
        if cost in gates:
            ax.axvline(gates[cost].threshold, color="#dc2626", linestyle="--", linewidth=1)
        if quality in gates:
            ax.axhline(gates[quality].threshold, color="#dc2626", linestyle="--", linewidth=1)
        _maybe_log(ax, [x for _, x, _ in pts])
        ax.margins(x=0.05, y=0.08)
        ax.set_xlabel(xlabel, fontsize=9)
    axes[0].set_ylabel(quality, fontsize=9)
    handles = _quality_cost_legend(configs, chunkers, color, marker)
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
