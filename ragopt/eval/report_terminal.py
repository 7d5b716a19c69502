"""The sweep table `ragopt sweep` prints: the key columns, every line at most TABLE_WIDTH characters. Every
column it leaves out is in results.csv, summary.md and report.html."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any, Callable

from ragopt.eval.gates import is_cost, quality_metric, rank_trials
from ragopt.eval.report_common import (
    STAGE_PERCENTILES, beats_floor, floor_label, floor_pairs, stage_latency_columns, stage_ms, switched_stages,
)
from ragopt.eval.results import ROUTED_SMALL_SHARE, Trial, measured

TABLE_ROWS = 15
TABLE_WIDTH = 120  # a terminal's width: a wider table wraps and cannot be read
_MARK = 4  # "  * " before a trial id


@dataclass(frozen=True)
class Column:
    head: str
    cell: Callable[[Trial], str]
    order: int  # where it stands in the table; columns are added by priority, shown in this order
    kind: str = ""  # "citation" or "stage": the columns a note explains
    width: int = 0

    def sized(self, trials: list[Trial]) -> Column:
        width = max(len(self.head), *(len(self.cell(t)) for t in trials)) + 2
        return Column(self.head, self.cell, self.order, self.kind, width)


def _number(value: Any, digits: int) -> str:
    number = measured(value)
    return "nan" if number is None else f"{number:.{digits}f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _metric(name: str, order: int) -> Column:
    head = name.replace("_part_contains_reference", " part ok").replace("incomplete_share", "incomplete")
    return Column(head, lambda t: _number(t.metrics.get(name), 4), order)


def _cost(head: str, field: str, digits: int, order: int) -> Column:
    return Column(head, lambda t: _number(getattr(t.costs, field), digits), order)


def _citation(precision: str, floor: str, order: int) -> Column:
    def cell(t: Trial) -> str:
        p, f = measured(t.metrics.get(precision)), measured(t.metrics.get(floor))
        if p is None:
            return ""
        return f"{p:.3f}" + ("" if f is None else f" ({f:.3f})") + ("!" if beats_floor(t, precision, floor) is False else " ")

    head = floor_label(precision).replace("citation ", "cite ").replace("answer contains reference", "contains ref")
    return Column(f"{head} (floor) ", cell, order, "citation")


def _stage(stage: str, order: int) -> Column:
    def cell(t: Trial) -> str:
        ms = [stage_ms(t, stage, pct) for pct in STAGE_PERCENTILES]
        return "-" if all(m is None for m in ms) else "/".join(_ms(m) for m in ms)

    return Column(f"{stage} {'/'.join(STAGE_PERCENTILES)}", cell, order, "stage")


def columns_by_priority(results: Any, first: Trial) -> tuple[list[Column], list[Column]]:
    """(the columns always shown: the objective's and the gates' metrics (beside their floors where they have one),
    the share of questions routed to the small backend where trials report one, context tokens, p95 latency; the
    others, most wanted first, as the README's table of the main job has them: nDCG@10, citation precision
    beside its floor, p50, recall@10, the other citation precisions and contains-reference beside theirs, the ms
    each stage adds where stages differ between trials; a stage a swept setting switches on and off comes first)."""
    pairs = floor_pairs(results.trials)
    gate_metrics = [v.metric for v in results.verdicts.get(first.id, []) if not is_cost(v.metric)]
    wanted = list(dict.fromkeys([quality_metric(results.gates), *gate_metrics]))
    key = [m for m in wanted if m not in {p for p, _ in pairs}]
    more = {m: len(wanted) + i for i, m in enumerate(m for m in ("recall@10", "ndcg@10") if m not in key)}
    n = len(wanted) + len(more)
    cites = [_citation(p, f, wanted.index(p) if p in wanted else n + 3 + i) for i, (p, f) in enumerate(pairs)]
    wanted_cites = [c for c, (p, _) in zip(cites, pairs) if p in wanted]
    other_cites = [c for c, (p, _) in zip(cites, pairs) if p not in wanted]
    routed = [Column("small share", lambda t: _number(t.metrics.get(ROUTED_SMALL_SHARE), 3), 0)] if (
        ROUTED_SMALL_SHARE not in wanted and any(ROUTED_SMALL_SHARE in t.metrics for t in results.trials)) else []
    stages = [_stage(s, n + 3 + len(pairs) + i) for i, s in enumerate(stage_latency_columns(results.trials))]
    switched = switched_stages(results.trials)  # what a stage the sweep switches on and off adds: the first optional
    cut = [_cost("cut", "chunks_cut", 2, n)] if any(measured(t.costs.chunks_cut) for t in results.trials) else []
    always = [*(_metric(m, wanted.index(m)) for m in key), *wanted_cites, *routed, _cost("ctx tok", "context_tokens", 0, n),
              *cut, _cost("p95 ms", "p95_ms", 2, n + 2)]
    first = [c for c in stages if c.head.split()[0] in switched]
    stages = [c for c in stages if c.head.split()[0] not in switched]
    ndcg, recall = ([_metric(m, more[m])] if m in more else [] for m in ("ndcg@10", "recall@10"))
    optional = [*first, *ndcg, *other_cites[:1], _cost("p50 ms", "p50_ms", 2, n + 1), *recall, *other_cites[1:], *stages]
    return always, optional


def table_lines(results: Any, rows: int = TABLE_ROWS, width: int = TABLE_WIDTH) -> list[str]:
    """The best `rows` trials in objective order ("*" selected, "+" passes every gate), with the columns that fit
    in `width` characters, in priority order. When even the key columns do not fit beside a long trial id, each
    trial's figures go on the line under its id."""
    ranked = rank_trials(results.trials, results.gates, results.verdicts)
    if not ranked:
        return []
    shown = ranked[:rows]
    always, optional = columns_by_priority(results, ranked[0])
    chosen = [c.sized(shown) for c in always]
    idw = max(len("trial"), *(len(t.id) for t in shown)) + 1
    stacked = _MARK + idw + sum(c.width for c in chosen) > width
    room = width - _MARK - (0 if stacked else idw)
    for column in (c.sized(shown) for c in optional):
        if sum(c.width for c in chosen) + column.width <= room:
            chosen.append(column)
    chosen.sort(key=lambda c: c.order)
    head = "".join(f"{c.head:>{c.width}}" for c in chosen)
    lines = [f"{'':{_MARK}}{'trial':<{idw}}" + ("" if stacked else head)] + ([f"{'':{_MARK}}{head}"] if stacked else [])
    for t in shown:
        ok = "*" if t.id == results.selected else "-" if t.dropped else (
            "+" if all(v.passed for v in results.verdicts.get(t.id, [])) else " ")
        cells = "".join(f"{c.cell(t):>{c.width}}" for c in chosen)
        lines += [f"  {ok} {t.id}", f"{'':{_MARK}}{cells}"] if stacked else [f"  {ok} {t.id:<{idw}}{cells}"]
    return lines + [line for note in _notes(shown, chosen, optional)
                    for line in textwrap.wrap(note, width, initial_indent="  ", subsequent_indent="    ")]


def _notes(shown: list[Trial], chosen: list[Column], optional: list[Column]) -> list[str]:
    notes = []
    if any(t.dropped for t in shown):
        notes.append("- dropped by the race: answer figures over the questions it answered only (results.csv, "
                     "summary.md say when and why)")
    if any(c.kind == "citation" and "!" in c.cell(t) for c in chosen for t in shown):
        notes.append("! not above its floor beyond noise (the 95% paired bootstrap interval of the difference does not lie "
                     "above zero); citation precision's floor is always citing [1], contains-reference's the top "
                     "passage's lead cut to the answer's length")
    if any(c.head == "cut" for c in chosen):
        notes.append("cut: the share of a trial's chunks longer than the embedder reads, embedded from their beginning "
                     "only (smaller chunks fit; embedder.long_chunks = \"mean\" embeds the mean of their windows)")
    stages = [c.head.split()[0] for c in chosen if c.kind == "stage"]
    if stages:
        notes.append(f"stage columns: the ms each stage adds (p50/p95; - where it did not run): {', '.join(stages)}")
    left_out = [c.head.strip() for c in optional if c.head not in {x.head for x in chosen}]
    if left_out:
        notes.append(f"more columns in summary.md and results.csv: {', '.join(left_out)}")
    return notes
