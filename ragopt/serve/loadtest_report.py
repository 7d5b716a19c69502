"""The load test's HTML page: the figures as a table, latency over time (every request, by outcome), the
latency and TTFT distributions, and the in-flight count against Little's law. Self-contained: inline CSS
and SVG plots (matplotlib without pyplot state), no JavaScript, no network."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from ragopt.eval.report_plots import _style_axes, _svg

_COLORS = {"ok": "#2563eb", "rate_limited": "#f59e0b", "refused": "#a855f7", "timed_out": "#dc2626", "error": "#6b7280"}


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
    return html.escape(str(v))


def _plots(report: dict[str, Any]) -> list[str]:
    from matplotlib.figure import Figure

    reqs = report["requests"]
    fig = Figure(figsize=(11, 3.6))
    ax = fig.add_subplot(1, 1, 1)
    for status, color in _COLORS.items():
        pts = [(r["start_s"], r["latency_ms"]) for r in reqs if r["status"] == status]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=9, color=color, label=f"{status} ({len(pts)})", alpha=0.75)
    ax.set_xlabel("request start (s)")
    ax.set_ylabel("end-to-end latency (ms)")
    ax.set_title("latency over time")
    ax.legend(loc="upper left", fontsize=8)
    _style_axes(ax)
    out = [_svg(fig, "loadtest-time")]

    fig = Figure(figsize=(11, 3.4))
    for i, (key, label) in enumerate((("latency_ms", "end-to-end latency (ms)"), ("ttft_ms", "time to first token (ms)"))):
        ax = fig.add_subplot(1, 2, i + 1)
        values = [r[key] for r in reqs if r["status"] == "ok" and r.get(key) is not None]
        if values:
            ax.hist(values, bins=min(40, max(5, len(values) // 5)), color="#2563eb", alpha=0.8)
            for p, style in (("p50", "-"), ("p95", "--"), ("p99", ":")):
                v = report[key].get(p)
                if v is not None:
                    ax.axvline(v, color="#111827", linestyle=style, linewidth=1, label=f"{p} {v:,.0f}")
            ax.legend(fontsize=8)
        ax.set_xlabel(label)
        ax.set_ylabel("requests")
        _style_axes(ax)
    out.append(_svg(fig, "loadtest-dist"))
    return out


def write_html(report: dict[str, Any], path: str | Path) -> None:
    ll = report["littles_law"]
    rows = [
        ("sent / ok / 429 / 503 / timed out / errors / lost",
         f"{report['sent']} / {report['ok']} / {report['rate_limited']} / {report['refused']} / {report['timed_out']} / {report['errors']} / {report['lost']}"),
        ("offered QPS / achieved QPS", f"{report['offered_qps']:.2f} / {report['achieved_qps']:.2f}"),
        *((f"{name} p50 / p95 / p99 (ms)", " / ".join(_fmt(report[key].get(p, "-")) for p in ("p50", "p95", "p99")))
          for name, key in (("latency", "latency_ms"), ("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("queue", "queue_ms"))),
        ("error / timeout / 429 rate", f"{report['error_rate']:.1%} / {report['timeout_rate']:.1%} / {report['rate_limited_rate']:.1%}"),
        ("answer-cache hit rate", f"{report['cache_hit_rate']:.1%}"),
        ("tokens per request in / out", f"{report['tokens_per_request']['in']:.1f} / {report['tokens_per_request']['out']:.1f}"),
        ("cost per request", _fmt(report["cost_per_request"])),
        ("Little's law: predicted / measured in flight",
         f"{ll['arrival_rate']:.2f}/s x {ll['mean_latency_s']:.3f} s = {ll['predicted_in_flight']:.2f} / {ll['measured_in_flight']:.2f}"),
    ]
    tenants = "".join(
        f"<tr><td>{html.escape(t)}</td><td>{v['requests']}</td><td>{v['tokens_in']}</td><td>{v['tokens_out']}</td>"
        f"<td>{v['saved_tokens']}</td><td>{_fmt(v['cost'])}</td><td>{_fmt(v['saved_cost'])}</td></tr>" for t, v in sorted(report["cost_by_tenant"].items()))
    table = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    per_tenant = _tenant_table(report)
    mode = {"poisson": f"Poisson {report['rate']}/s", "closed_loop": f"{report['concurrency']} concurrent clients",
            "tenants": f"{len(report.get('tenants', {}))} tenants' loads"}[report["mode"]]
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>ragopt loadtest</title>
<style>body{{font-family:system-ui,sans-serif;margin:24px;color:#111827}}table{{border-collapse:collapse;margin:12px 0}}
th,td{{border:1px solid #e5e7eb;padding:4px 10px;text-align:left}}th{{background:#f9fafb}}</style></head><body>
<h1>Load test of {html.escape(report['url'])}</h1><p>{html.escape(mode)}, {report['duration_s']:g} s, elapsed {report['elapsed_s']:.1f} s</p>
<table>{table}</table><h2>Cost by tenant</h2><table><tr><th>tenant</th><th>answered</th><th>tokens in</th><th>tokens out</th>
<th>tokens saved by cache</th><th>cost</th><th>cost saved by cache</th></tr>{tenants}</table>{per_tenant}{''.join(_plots(report))}</body></html>"""
    Path(path).write_text(page, encoding="utf-8")


_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:system-ui,sans-serif;margin:24px;color:#111827}}table{{border-collapse:collapse;margin:12px 0}}
th,td{{border:1px solid #e5e7eb;padding:4px 10px;text-align:left}}th{{background:#f9fafb}}</style></head><body>{body}</body></html>"""


def _tenant_table(report: dict[str, Any]) -> str:
    """Per tenant load: outcomes, TTFT, tokens/s; Jain's index over their weighted service."""
    if "tenants" not in report:
        return ""
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{t['weight']:g}</td><td>{t['sent']}</td><td>{t['ok']}</td><td>{t['rate_limited']}</td>"
        f"<td>{t['refused']}</td><td>{t['timed_out']}</td><td>{_fmt(t['ttft_ms'].get('p50', '-'))}</td><td>{_fmt(t['ttft_ms'].get('p95', '-'))}</td>"
        f"<td>{_fmt(t['tokens_per_s'])}</td></tr>" for name, t in report["tenants"].items())
    jain = report.get("jain_index")
    return (f"<h2>Per tenant</h2><p>Jain's index over weighted service (tokens / weight): {_fmt(jain) if jain is not None else '-'}</p>"
            "<table><tr><th>tenant</th><th>weight</th><th>sent</th><th>ok</th><th>429</th><th>503</th><th>timed out</th>"
            f"<th>TTFT p50 (ms)</th><th>TTFT p95 (ms)</th><th>tokens/s</th></tr>{rows}</table>")


def write_search_html(report: dict[str, Any], path: str | Path) -> None:
    """The capacity search: every step (rate, each repeat's SLO figures, saturation, Little's law, then the figures
    over its repeats together, which decide it) and the answer."""
    rows = []
    for step in report["steps"]:
        for i, r in enumerate(step["repeats"]):
            values = ", ".join(f"{k} = {_fmt(v) if v is not None else '-'}" for k, v in r["values"].items())
            ratio = r["littles_law_ratio"]
            rows.append(f"<tr><td>{step['rate_rps']:.3g}</td><td>{i + 1}</td><td>{'yes' if r['met'] else 'no'}</td><td>{html.escape(values)}</td>"
                        f"<td>{r['seed_report']['ok']} / {r['seed_report']['sent']}</td><td>{'yes' if r['saturated'] else 'no'}</td>"
                        f"<td>{_fmt(ratio) if ratio is not None else '-'}</td></tr>")
        together = ", ".join(f"{k} = {_fmt(v) if v is not None else '-'}" for k, v in step["values"].items())
        rows.append(f"<tr><td>{step['rate_rps']:.3g}</td><td><b>together</b></td><td><b>{'yes' if step['met'] else 'no'}</b></td>"
                    f"<td>{html.escape(together)}</td><td></td><td>{'yes' if step['saturated'] else 'no'}</td><td></td></tr>")
    low, high = report["interval_rps"]
    body = (f"<h1>Capacity of {html.escape(report['url'])}</h1><p>SLO {html.escape(', '.join(report['slo']))}; steps of "
            f"{report['duration_s']:g} s. Capacity <b>{report['capacity_rps']:.3g} req/s</b>, interval {low:.3g} .. "
            f"{'not reached' if high is None else format(high, '.3g')} req/s; saturated at capacity: "
            f"{'yes' if report['saturated_at_capacity'] else 'no'}.</p><table><tr><th>rate (req/s)</th><th>repeat</th>"
            "<th>meets SLO</th><th>figures</th><th>ok / sent</th><th>saturated</th><th>Little's law measured / predicted</th></tr>"
            + "".join(rows) + "</table>")
    Path(path).write_text(_PAGE.format(title="ragopt loadtest capacity", body=body), encoding="utf-8")
