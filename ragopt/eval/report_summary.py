"""summary.md: the selected trial, the objective, gate verdicts, and every trial in objective order."""

from __future__ import annotations

from ragopt.eval.gates import fmt, is_cost, parse_gates, quality_metric
from ragopt.eval.report_common import (
    _COST_LABELS, _extra_params, _fmt_value, _md_params, _passed, _ranked, _retriever_label, _verdicts, closest_trial,
)
from ragopt.eval.results import SweepResults, measured


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


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
