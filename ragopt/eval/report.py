"""Sweep outputs: results.json, results.csv, summary.md and a self-contained report.html.

This module writes them all (`write_outputs`) and holds the CSV; the markdown is report_summary, the page
report_html, its plots report_plots, and what they share report_common. The public names stay importable
from here.

The HTML needs no network and no JavaScript: CSS and the plots (SVG drawn by matplotlib, no pyplot state)
are inlined. Plots: Recall@K curves per chunker and retriever; quality against context tokens and against
p95 latency with the Pareto front marked; a per-query latency histogram when latencies are given.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from ragopt.eval.report_common import Latencies, _metric_sort_key, _passed, _ranked, _verdicts, closest_trial, pareto_front
from ragopt.eval.report_html import render_html
from ragopt.eval.report_plots import plot_latency_histogram, plot_quality_vs_cost, plot_recall_curves
from ragopt.eval.report_summary import render_summary
from ragopt.eval.results import COST_NAMES, SweepResults

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
    raced = ["race_status", "race_round", "answered_questions", "race_reason"] if results.race else []
    header = ["rank", "id", "selected", "passed", "failed_gates", *raced, *params, *metrics, *costs]
    rows = []
    for rank, t in enumerate(trials, start=1):
        row: dict[str, Any] = {
            "rank": rank,
            "id": t.id,
            "selected": t.id == results.selected,
            "passed": _passed(results, t),
            "failed_gates": "; ".join(v.message for v in _verdicts(results, t) if not v.passed),
        }
        if t.race is not None:
            row.update(race_status=t.race.status, race_round=t.race.round, answered_questions=t.race.answered,
                       race_reason=t.race.reason)
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
