"""summary.md: the selected trial, the objective, gate verdicts (marked where a pass is within noise), the
held-out split's figures with their intervals, and every trial in objective order, with citation precision
beside its floor and each stage's added latency where stages differ between trials."""

from __future__ import annotations

from ragopt.eval.gates import fmt, is_cost, parse_gates, quality_metric
from ragopt.eval.report_common import (
    _COST_LABELS, BELOW_FLOOR, STAGE_PERCENTILES, _extra_params, _fmt_value, _md_params, _passed, _ranked,
    _retriever_label, _verdicts, FLOORS_TEXT, chars_columns, beats_floor, floor_pairs, floor_label, closest_trial, fmt_interval,
    held_out_rows, judge_cost_text, judged_trials, noisy_gates, race_note, stage_latency_columns, stage_ms, with_floor,
)
from ragopt.eval.results import ROUTED_SMALL_SHARE, BaselineComparison, HeldOut, SweepResults, Trial, measured


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


_SUMMARY_COSTS = ("context_tokens", "p50_ms", "p95_ms")  # what the objective reads, and the median beside p95
WITHIN_NOISE = "**within noise**"
OVERFIT = "**OVERFIT**"


def _summary_columns(results: SweepResults) -> tuple[list[str], list[str], list[str]]:
    """The summary's compact columns: the swept params beyond the base ones, the objective's quality metric (beside
    the share of questions routed to the small backend, where trials report one) and the gates' metrics (less
    citation precisions: they have their own column, beside the floor), and the costs the objective and the gates
    read. Every column is in results.csv."""
    trials = results.trials
    gated = [g.metric for g in parse_gates(results.gates)]
    with_floors = {p for p, _ in floor_pairs(trials)}
    quality = quality_metric(results.gates)
    metrics = [m for m in (quality, *chars_columns(quality), ROUTED_SMALL_SHARE, *(m for m in gated if not is_cost(m)))
               if m not in with_floors]
    costs = [*_SUMMARY_COSTS, *(m for m in gated if is_cost(m))]

    def present(names: list[str]) -> list[str]:
        return [n for n in dict.fromkeys(names) if any(measured(t.values().get(n)) is not None for t in trials)]

    return _extra_params(trials), present(metrics), present(costs)


def render_summary(results: SweepResults) -> str:
    """summary.md: the selected trial, the objective, gate verdicts, and every trial in objective order."""
    out = _md_header(results)
    ranked = _ranked(results)
    pairs = floor_pairs(results.trials)
    out += _md_outcome(results, pairs)
    if results.held_out is not None:
        out += _md_held_out(results.held_out)
    out += _md_judged(results)
    if results.baseline is not None:
        out += _md_baseline(results.baseline)
    if results.race is not None:
        from ragopt.eval.race import race_lines

        out += ["## The race", "", *(f"- {line.strip()}" for line in race_lines(results.race)), ""]
    out += _md_trials(results, ranked, pairs)
    out += _md_failures(results, ranked)
    return "\n".join(out)


def _md_header(results: SweepResults) -> list[str]:
    """The title, the dataset, the objective and the gates."""
    ds = results.dataset
    return [
        "# ragopt sweep summary",
        "",
        f"Dataset **{ds.name}** ({ds.n_documents:,} documents, {ds.n_queries:,} queries; "
        f"fingerprint `{ds.fingerprint}`), {len(results.trials)} trials, {results.created_at}.",
        "",
        *([f"**Figures from a generated set:** {ds.generated}.", ""] if ds.generated else []),
        f"**Objective:** {results.objective}.",
        "",
        "**Gates:** " + (", ".join(f"`{g}`" for g in results.gates) if results.gates else "none"),
        "",
    ]


def _md_outcome(results: SweepResults, pairs: list[tuple[str, str]]) -> list[str]:
    """The selected trial, or the closest one when none passes, with its citations and gate verdicts."""
    sel = results.selected_trial
    if sel is not None:
        out = [f"## Selected: `{sel.id}`", "", _md_params(sel), ""]
        shown = sel
    else:
        out = ["## No trial passes every gate", ""]
        shown = closest_trial(results)
        if shown is not None:
            out += [f"Closest to passing: `{shown.id}` ({_md_params(shown)}).", ""]
    if shown is not None and pairs:
        out += [_md_citations(shown, pairs), ""]
    if shown is not None and _verdicts(results, shown):
        out += _md_verdicts(results, shown)
    return out


def _md_verdicts(results: SweepResults, t: Trial) -> list[str]:
    """A trial's gate verdicts as a table, after a note on the gates that pass only within noise."""
    out = []
    noisy = noisy_gates(results, t)
    if noisy:
        out += [f"{WITHIN_NOISE}: {', '.join(f'`{v.gate}`' for v in noisy)} "
                f"{'passes' if len(noisy) == 1 else 'pass'} only within noise (the metric's bootstrap interval "
                "over queries straddles the threshold).", ""]
    out += ["| gate | observed | result |", "|---|---:|---|"]
    for v in _verdicts(results, t):
        obs = "not measured" if v.observed is None else fmt(v.observed)
        word = "FAIL" if not v.passed else f"pass, {WITHIN_NOISE}" if v.within_noise else "pass"
        out.append(f"| `{v.gate}` | {obs} | {word}: {_md_escape(v.message)} |")
    return out + [""]


def _md_baseline(b: BaselineComparison) -> list[str]:
    out = [
        f"## Baseline: {'REGRESSION' if b.regressed else 'no regression'}",
        "",
        f"Against `{b.path}`. Per-query metrics: a regression is a mean drop beyond {fmt(b.tolerance)} whose "
        "paired bootstrap interval excludes zero. Trial costs (p95_ms, context_tokens): a rise beyond the "
        "share of the baseline each verdict states.",
        "",
    ]
    out += [f"- {'**regressed**' if v.regressed else 'ok'} `{v.trial_id}` {_md_escape(v.message)}"
            for v in b.verdicts]
    return out + [""]


def _md_trials(results: SweepResults, ranked: list[Trial], pairs: list[tuple[str, str]]) -> list[str]:
    """Every trial in objective order, in the summary's compact columns, under notes on the citation and
    stage columns."""
    extras, metrics, costs = _summary_columns(results)
    stages = stage_latency_columns(results.trials)
    head = ["#", "trial", "chunker", "retriever", "top_k", *extras, *metrics,
            *(_COST_LABELS.get(c, c) for c in costs), *(floor_label(p) for p, _ in pairs),
            *(f"{s} {pct} ms" for s in stages for pct in STAGE_PERCENTILES), "gates"]
    notes = []
    if pairs:
        notes.append(f"{FLOORS_TEXT}; **{BELOW_FLOOR}** marks a trial whose figure is not above its floor beyond "
                     "noise (the 95% paired bootstrap interval of the difference does not lie above zero).")
    if stages:
        notes.append(f"Stage columns ({', '.join(f'`{s}`' for s in stages)}): the latency that stage adds, for "
                     "stages not in every trial or whose setting is swept; – where it did not run.")
    out = ["## Trials (objective order, passing first)", "",
           "Key columns only: every metric and cost of every trial is in `results.csv`.", "",
           *(line for n in notes for line in (n, "")),
           "| " + " | ".join(head) + " |",
           "|" + "|".join("---:" if i == 0 or 4 <= i < len(head) - 1 else "---" for i in range(len(head))) + "|"]
    for rank, t in enumerate(ranked, start=1):
        dumped, values = t.params.model_dump(), t.values()
        failed = [v.gate for v in _verdicts(results, t) if not v.passed]
        noisy = [v.gate for v in noisy_gates(results, t)]
        name = f"**{t.id}**" if t.id == results.selected else t.id
        gates = "pass" if not failed else "fails " + ", ".join(f"`{g}`" for g in failed)
        if t.dropped:
            gates = race_note(t)
        elif noisy:
            gates += f" ({WITHIN_NOISE}: {', '.join(f'`{g}`' for g in noisy)})"
        cells = [
            str(rank), name, t.params.chunker, _retriever_label(t.params), str(t.params.top_k),
            *("" if dumped.get(k) is None else str(dumped[k]) for k in extras),
            *(_fmt_value(n, values.get(n)) for n in (*metrics, *costs)),
            *(_md_floor(t, p, f) for p, f in pairs),
            *(_md_stage(t, s, pct) for s in stages for pct in STAGE_PERCENTILES),
            gates,
        ]
        out.append("| " + " | ".join(_md_escape(c) for c in cells) + " |")
    return out + [""]


def _md_failures(results: SweepResults, ranked: list[Trial]) -> list[str]:
    """Each failing trial with the messages of the gates it fails."""
    failing = [t for t in ranked if not _passed(results, t)]
    if not failing:
        return []
    out = ["## Why the other trials failed", ""]
    for t in failing:
        msgs = race_note(t) or "; ".join(v.message for v in _verdicts(results, t) if not v.passed)
        out.append(f"- `{t.id}`: {_md_escape(msgs)}")
    return out + [""]


def _md_floor(t: Trial, precision: str, floor: str) -> str:
    text = with_floor(t, precision, floor)
    return text + f" **{BELOW_FLOOR}**" if beats_floor(t, precision, floor) is False else text


def _md_stage(t: Trial, stage: str, pct: str) -> str:
    ms = stage_ms(t, stage, pct)
    return "–" if ms is None else _fmt_value(f"{stage}_{pct}_ms", ms)


def _md_citations(t: Trial, pairs: list[tuple[str, str]]) -> str:
    cells = [f"{floor_label(p)} {_md_floor(t, p, f)}" for p, f in pairs if measured(t.metrics.get(p)) is not None]
    return ("Answers: " + ", ".join(cells) + f". {FLOORS_TEXT}.") if cells else "Answers: not scored for this trial."


def _md_held_out(h: HeldOut) -> list[str]:
    rows = held_out_rows(h)
    flagged = [name for name, *_, overfit in rows if overfit]
    out = [
        f"## Held out: selected on `{h.selection_split}`, reported on `{h.split}`"
        + (f": {OVERFIT} ({', '.join(flagged)})" if flagged else ""),
        "",
        f"`{h.trial}` re-run on the {h.split} split's {h.n_queries:,} queries. Each figure is the mean over queries "
        f"with its {h.confidence:.0%} bootstrap interval; {OVERFIT} marks a metric whose held-out mean falls "
        "outside the selection split's interval.",
        "",
    ]
    if not rows:
        return out + ["No per-query scores to bootstrap.", ""]
    out += [f"| metric | selection ({_md_escape(h.selection_split)}) | held out ({_md_escape(h.split)}) | result |",
            "|---|---:|---:|---|"]
    for name, chosen, held, overfit in rows:
        result = OVERFIT if overfit else "–" if overfit is None else "within the selection interval"
        out.append(f"| {_md_escape(name)} | {fmt_interval(chosen)} | {fmt_interval(held)} | {result} |")
    return out + [""]


def _md_judged(results: SweepResults) -> list[str]:
    """Judged metrics per trial with their intervals, what judging cost, and a few unsupported sentences."""
    judged = judged_trials(results)
    if not judged:
        return []
    names = list(dict.fromkeys(n for _, intervals, _ in judged for n in intervals))
    out = ["## Judged answers", "",
           "Each figure is the mean over queries with its 95% bootstrap interval; judge calls are the new ones this "
           "run made (verdicts are cached by judge, prompt version and inputs).", "",
           "| trial | " + " | ".join(names) + " | judging |", "|---|" + "---:|" * len(names) + "---|"]
    for t, intervals, costs in judged:
        out.append(f"| {t.id} | " + " | ".join(fmt_interval(intervals.get(n)) or "–" for n in names)
                   + f" | {judge_cost_text(costs)} |")
    shown = results.selected_trial or judged[0][0]
    examples = [(q, s) for q, sentences in sorted(shown.unsupported.items()) for s in sentences][:5]
    if examples:
        out += ["", f"Unsupported sentences in `{shown.id}` (first {len(examples)} of "
                f"{sum(len(v) for v in shown.unsupported.values())}; all in results.json `unsupported`):", ""]
        out += [f"- `{q}`: {_md_escape(s)}" for q, s in examples]
    return out + [""]
