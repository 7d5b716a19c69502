"""report.html: one self-contained page, no network and no JavaScript: the CSS and the plots (report_plots) are
inlined. Beside the summary's content: gates that pass only within noise are marked, the held-out split's
figures sit beside the selection split's with their intervals (OVERFIT where the held-out mean leaves the
selection interval), citation precision is shown beside its floor, and stages that differ between trials
get their own p50/p95 columns."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

from ragopt.eval.gates import fmt, quality_metric
from ragopt.eval.report_common import (
    _COST_LABELS, BELOW_FLOOR, chars_columns, STAGE_PERCENTILES, Latencies, _chunker_order, _fmt_value, _md_params, _passed, _ranked,
    _retriever_label, _table_columns, _verdicts, FLOORS_TEXT, beats_floor, floor_pairs, floor_label, closest_trial,
    fmt_interval, held_out_rows, judge_cost_text, judged_trials, noisy_gates, plot_metric, race_note, stage_latency_columns,
    stage_ms, with_floor,
)
from ragopt.eval.report_plots import plot_latency_histogram, plot_quality_vs_cost, plot_recall_curves
from ragopt.eval.results import ROUTED_SMALL_SHARE, BaselineComparison, GateVerdict, HeldOut, SweepResults, Trial, measured


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
.noise { color: #92400e; background: #fef3c7; font-weight: 600; border-radius: 4px; padding: 0 4px; white-space: nowrap; }
.floor { color: var(--bad); font-weight: 600; white-space: nowrap; }
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _verdict_table(verdicts: Sequence[GateVerdict]) -> str:
    rows = []
    for v in verdicts:
        obs = "not measured" if v.observed is None else fmt(v.observed)
        cls, word = ("pass", "pass") if v.passed else ("fail", "FAIL")
        noise = f" {_NOISE}" if v.passed and v.within_noise else ""
        rows.append(
            f"<tr><td><code>{_e(v.gate)}</code></td><td class='n'>{_e(obs)}</td>"
            f"<td class='n'>{_e(v.op)} {_e(fmt(v.threshold))}</td>"
            f"<td class='nw'><span class='{cls}'>{word}</span>{noise}</td><td>{_e(v.message)}</td></tr>"
        )
    return ("<table class='verdicts'><tr><th>gate</th><th class='n'>observed</th><th class='n'>needs</th><th>result</th>"
            "<th>verdict</th></tr>" + "".join(rows) + "</table>")


def _kv(t: Trial, quality: str) -> str:
    items = [(quality, t.metrics.get(quality))]
    items += [(m, t.metrics.get(m)) for m in ("recall@10", "mrr@10", "span_recall@10")
              if m != quality and m in t.metrics]
    items += [(c, getattr(t.costs, c)) for c in ("context_tokens", "p50_ms", "p95_ms") if getattr(t.costs, c) is not None]
    return "<div class='kv'>" + "".join(
        f"<div><b>{_e(_fmt_value(k, v))}</b><span>{_e(_COST_LABELS.get(k, k))}</span></div>" for k, v in items
    ) + "</div>"


_HTML_METRICS = ("recall@10", "ndcg@10", "mrr@10", "span_recall@10", ROUTED_SMALL_SHARE)
_HTML_COSTS = ("context_tokens", "p50_ms", "p95_ms")
_NOISE = "<span class='noise'>within noise</span>"
_OVERFIT = "<span class='fail'>OVERFIT</span>"


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
    pairs = floor_pairs(results.trials)
    with_floors = {p for p, _ in pairs}
    shown = (*_HTML_METRICS, *chars_columns(quality_metric(results.gates)))
    metrics = [m for m in common if m not in with_floors
               and (m in shown or (m in gated and not m.endswith(("_ms", "_tokens"))))]
    costs = [c for c in _HTML_COSTS if any(measured(getattr(t.costs, c)) is not None for t in results.trials)]
    stages = stage_latency_columns(results.trials)
    head = ["#", "trial", "chunker", "retriever", "top_k", *extras, *metrics, *(_COST_LABELS[c] for c in costs),
            *(floor_label(p) for p, _ in pairs),
            *(f"{s} {pct} ms" for s in stages for pct in STAGE_PERCENTILES), "gates"]
    numeric = {0, 4, *range(5 + len(extras), len(head) - 1)}
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
        noisy = noisy_gates(results, t)
        if t.dropped:
            gate_cell = f"<span class='why'>{_e(race_note(t))}</span>"
        elif noisy:
            gate_cell += f" {_NOISE} <span class='why'>{_e(', '.join(v.metric for v in noisy))}</span>"
        cells = [
            f"<td class='n'>{rank}</td>", f"<td class='id'>{_e(t.id)}</td>", f"<td>{_e(t.params.chunker)}</td>",
            f"<td class='nw'>{_e(_retriever_label(t.params))}</td>", f"<td class='n'>{t.params.top_k}</td>",
            *(f"<td>{_e('' if dumped.get(k) is None else dumped[k])}</td>" for k in extras),
            *(f"<td class='n'>{_e(_fmt_value(m, t.metrics.get(m)))}</td>" for m in metrics),
            *(f"<td class='n'>{_e(_fmt_value(c, getattr(t.costs, c, None)))}</td>" for c in costs),
            *(f"<td class='n'>{_floor_html(t, p, f)}</td>" for p, f in pairs),
            *(f"<td class='n'>{_stage_html(t, s, pct)}</td>" for s in stages for pct in STAGE_PERCENTILES),
            f"<td class='nw'>{gate_cell}</td>",
        ]
        out.append(f"<tr class='{cls}'>" + "".join(cells) + "</tr>")
    out.append("</table></div>")
    return "".join(out)


def _floor_html(t: Trial, precision: str, floor: str) -> str:
    text = _e(with_floor(t, precision, floor))
    return text + f" <span class='floor'>{BELOW_FLOOR}</span>" if beats_floor(t, precision, floor) is False else text


def _stage_html(t: Trial, stage: str, pct: str) -> str:
    ms = stage_ms(t, stage, pct)
    return "–" if ms is None else _e(_fmt_value(f"{stage}_{pct}_ms", ms))


def _citations_html(t: Trial, pairs: Sequence[tuple[str, str]]) -> str:
    cells = [f"{_e(floor_label(p))} {_floor_html(t, p, f)}" for p, f in pairs if measured(t.metrics.get(p)) is not None]
    if not cells:
        return "<p>Answers: not scored for this trial.</p>"
    return "<p>Answers: " + ", ".join(cells) + f". {_e(FLOORS_TEXT)}.</p>"


def _held_out_html(h: HeldOut) -> str:
    rows = held_out_rows(h)
    flagged = [name for name, *_, overfit in rows if overfit]
    title = (f"<h2>Held out: selected on <code>{_e(h.selection_split)}</code>, reported on <code>{_e(h.split)}</code>"
             + (f" {_OVERFIT}" if flagged else "") + "</h2>")
    note = (f"<p class='meta'><code>{_e(h.trial)}</code> re-run on the {_e(h.split)} split's {h.n_queries:,} "
            f"queries. Each figure is the mean over queries with its {h.confidence:.0%} bootstrap interval; OVERFIT "
            "marks a metric whose held-out mean falls outside the selection split's interval.</p>")
    if not rows:
        return title + note + "<p>No per-query scores to bootstrap.</p>"
    body = "".join(
        f"<tr><td>{_e(name)}</td><td class='n'>{_e(fmt_interval(chosen))}</td><td class='n'>{_e(fmt_interval(held))}</td>"
        + ("<td>" + (_OVERFIT if overfit else "–" if overfit is None else
                     "<span class='pass'>within the selection interval</span>") + "</td></tr>")
        for name, chosen, held, overfit in rows
    )
    return (title + note + "<table class='narrow heldout'><tr><th>metric</th>"
            f"<th class='n'>selection ({_e(h.selection_split)})</th><th class='n'>held out ({_e(h.split)})</th>"
            f"<th>result</th></tr>{body}</table>")


def _judged_html(results: SweepResults) -> str:
    judged = judged_trials(results)
    names = list(dict.fromkeys(n for _, intervals, _ in judged for n in intervals))
    head = "".join(f"<th>{_e(n)}</th>" for n in names)
    rows = "".join(
        f"<tr><td><code>{_e(t.id)}</code></td>" + "".join(f"<td class='n'>{_e(fmt_interval(iv.get(n)) or '–')}</td>" for n in names)
        + f"<td>{_e(judge_cost_text(costs))}</td></tr>" for t, iv, costs in judged)
    return ("<h2>Judged answers</h2><p class='meta'>Mean over queries with its 95% bootstrap interval; judge calls are "
            f"the new ones this run made.</p><table><tr><th>trial</th>{head}<th>judging</th></tr>{rows}</table>")


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


def _head_html(results: SweepResults) -> list[str]:
    """The document head and the page title with its dataset line."""
    ds = results.dataset
    return [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>ragopt sweep: {_e(ds.name)}</title><style>{_CSS}</style></head><body><main>",
        "<h1>ragopt sweep report</h1>",
        f"<p class='meta'>Dataset <b>{_e(ds.name)}</b> · {ds.n_documents:,} documents · {ds.n_queries:,} queries · "
        f"{len(results.trials)} trials · {_e(results.created_at)}</p>",
        *([f"<p class='meta'><b>Figures from a generated set:</b> {_e(ds.generated)}</p>"] if ds.generated else []),
    ]


def _banner_html(results: SweepResults, quality: str, pairs: Sequence[tuple[str, str]]) -> tuple[str, Trial | None, str]:
    """The banner for the selected trial, or for the closest one when none passes; with the trial whose gate
    verdicts the page shows next and that table's title."""
    sel = results.selected_trial
    if sel is not None:
        noisy = noisy_gates(results, sel)
        banner = (
            f"<section class='card banner'><h2>Selected: <code>{_e(sel.id)}</code></h2>"
            f"<div>{_e(_md_params(sel))}</div>{_kv(sel, quality)}"
            + (f"<p>{_NOISE} " + ", ".join(f"<code>{_e(v.gate)}</code>" for v in noisy)
               + f" {'passes' if len(noisy) == 1 else 'pass'} only within noise: the metric's bootstrap interval over"
               " queries straddles the threshold.</p>" if noisy else "")
            + (_citations_html(sel, pairs) if pairs else "")
            + "</section>"
        )
        return banner, sel, "Gate verdicts for the selected trial"
    closest = closest_trial(results)
    banner = (
        "<section class='card banner nopass'><h2>No trial passes every gate</h2>"
        + (f"<div>Closest to passing: <code>{_e(closest.id)}</code> ({_e(_md_params(closest))})</div>"
           f"{_kv(closest, quality)}" if closest is not None else "")
        + "</section>"
    )
    return banner, closest, "Gate verdicts for the closest trial"


def _baseline_html(b: BaselineComparison) -> str:
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
    return (
        f"<h2>Baseline comparison: <span class='{cls}'>"
        f"{'regression' if b.regressed else 'no regression'}</span></h2>"
        f"<p class='meta'>Against <code>{_e(b.path)}</code>. Per-query metrics regress on a mean drop beyond "
        f"{_e(fmt(b.tolerance))} whose paired bootstrap interval excludes zero{boot_note}; trial costs on a rise "
        "beyond their tolerance "
        "(a share of the baseline).</p>"
        "<table><tr><th>trial</th><th>metric</th><th class='n'>baseline</th><th class='n'>current</th>"
        f"<th class='n'>diff</th><th class='n'>CI</th><th>result</th></tr>{rows}</table>"
    )


def _plots_html(results: SweepResults, quality: str, latencies: Latencies | None) -> list[str]:
    """Each figure that has something to draw, under its title and caption."""
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
    return [f"<h2>{_e(title)}</h2><div class='plot'><p>{_e(caption)}</p>{svg}</div>"
            for title, caption, svg in plots if svg is not None]


def _trials_intro_html(results: SweepResults, pairs: Sequence[tuple[str, str]]) -> str:
    """The heading over the trials table and what its citation and stage columns mean."""
    stages = stage_latency_columns(results.trials)
    return ("<h2>All trials</h2><p class='meta'>In objective order, passing trials first; "
            "results.csv has every metric and cost."
            + (f" {_e(FLOORS_TEXT)}; <span class='floor'>{BELOW_FLOOR}</span> marks a trial whose figure is not above "
               "its floor beyond noise (the 95% paired bootstrap interval of the difference does not lie above zero)."
               if pairs else "")
            + (" Stage columns (" + ", ".join(f"<code>{_e(st)}</code>" for st in stages) + "): the latency that "
               "stage adds, for stages not in every trial or whose setting is swept; – where it did not run."
               if stages else "")
            + "</p>")


def _footer_html(results: SweepResults) -> str:
    """Provenance: the dataset's fingerprint, the models, the versions, and the search space."""
    ds = results.dataset
    v = results.versions
    models = ", ".join(f"{_e(k)}: {_e(m.name)} <code>{_e(m.fingerprint)}</code>" for k, m in results.models.items())
    pkgs = ", ".join(f"{_e(k)} {_e(val)}" for k, val in v.packages.items())
    return (
        "<footer><p>"
        f"Dataset <code>{_e(ds.path)}</code> fingerprint <code>{_e(ds.fingerprint)}</code>. "
        f"{('Models: ' + models + '. ') if models else ''}"
        f"ragopt {_e(v.ragopt)}, Python {_e(v.python)}{('; ' + pkgs) if pkgs else ''}.</p>"
        f"<details><summary>Search space</summary><pre>{_e(json.dumps(results.search_space, indent=2))}</pre>"
        "</details></footer></main></body></html>"
    )


def render_html(results: SweepResults, latencies: Latencies | None = None) -> str:
    ranked = _ranked(results)
    quality = plot_metric(results)
    parts = _head_html(results)
    gates_line = ", ".join(f"<code>{_e(g)}</code>" for g in results.gates) or "none"
    pairs = floor_pairs(results.trials)
    banner, shown, shown_title = _banner_html(results, quality, pairs)
    parts.append(banner)
    parts.append(f"<p class='objective'><b>Objective:</b> {_e(results.objective)}. <b>Gates:</b> {gates_line}</p>")
    if shown is not None and _verdicts(results, shown):
        parts.append(f"<h2>{shown_title}</h2>{_verdict_table(_verdicts(results, shown))}")
    if results.held_out is not None:
        parts.append(_held_out_html(results.held_out))
    if judged_trials(results):
        parts.append(_judged_html(results))
    if results.baseline is not None:
        parts.append(_baseline_html(results.baseline))
    parts += _plots_html(results, quality, latencies)
    parts.append(_trials_intro_html(results, pairs))
    parts.append(_trials_table(results, ranked))
    index_table = _index_table(results)
    if index_table is not None:
        parts.append(f"<h2>Indexes</h2>{index_table}")
    parts.append(_footer_html(results))
    return "\n".join(parts)
