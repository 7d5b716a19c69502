import csv
import shutil
import subprocess
from pathlib import Path

import pytest

from ragopt.eval.bootstrap import compare_to_baseline
from ragopt.eval.gates import evaluate_gates
from ragopt.eval.report import closest_trial, pareto_front, render_html, render_summary, write_outputs
from ragopt.eval.results import DatasetInfo, SweepResults, Trial, TrialParams, Versions
from html_check import check_html
from synthetic_results import make_results

CHROMIUM = Path("/usr/bin/chromium")


def test_pareto_front():
    pts = [(100, 0.5), (200, 0.7), (150, 0.4), (300, 0.7), (50, 0.3), (400, 0.9), (200, 0.6)]
    assert pareto_front(pts) == [4, 0, 1, 5]
    assert pareto_front([]) == []
    assert pareto_front([(1, 1), (1, 1)]) == [0]


def test_write_all_outputs(tmp_path):
    results, latencies = make_results(with_latencies=True)
    paths = write_outputs(results, tmp_path / "out", latencies)
    assert {p.name for p in paths.values()} == {"results.json", "results.csv", "summary.md", "report.html"}
    assert all(p.exists() and p.stat().st_size > 0 for p in paths.values())

    assert SweepResults.load(paths["json"]) == results

    with paths["csv"].open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(results.trials)
    assert rows[0]["id"] == results.selected and rows[0]["selected"] == "True" and rows[0]["passed"] == "True"
    for col in ("chunker", "retriever", "top_k", "recall@10", "ndcg@10", "context_tokens", "p95_ms", "failed_gates"):
        assert col in rows[0]
    failing = [r for r in rows if r["passed"] == "False"]
    assert failing and all("needs" in r["failed_gates"] for r in failing)
    assert float(rows[0]["recall@10"]) == pytest.approx(results.selected_trial.metrics["recall@10"])

    md = paths["summary"].read_text()
    assert f"## Selected: `{results.selected}`" in md
    assert results.objective in md
    assert "## Why the other trials failed" in md and "short by" in md

    page = paths["html"].read_text()
    check_html(page)
    assert page.count("<svg") == 3  # recall curves, quality vs cost, latency histogram
    assert "Pareto front" in page and results.selected in page and results.objective in page


def test_no_passing_trial_and_baseline(tmp_path):
    results = make_results(n_queries=12, gates=["recall@10>=0.99", "p95_ms<=1"])
    assert results.selected is None
    results.baseline = compare_to_baseline(results, results, tolerance=0.01, baseline_path="old/results.json")
    md = render_summary(results)
    assert "## No trial passes every gate" in md and "Closest to passing" in md
    closest = closest_trial(results)
    assert closest.id in md
    # the closest trial fails the fewest gates, by the least
    fails = {t.id: sum(not v.passed for v in results.verdicts[t.id]) for t in results.trials}
    assert fails[closest.id] == min(fails.values())
    assert "no regression" in md
    page = render_html(results)
    check_html(page)
    assert "No trial passes every gate" in page and "Baseline comparison" in page
    assert page.count("<svg") == 2  # no latencies given: no histogram


def test_minimal_results_render(tmp_path):
    """One trial, no gates, no recall@top_k and no costs: still valid outputs, fewer plots."""
    t = Trial(id="only", params=TrialParams(chunker="whole", retriever="bm25", top_k=10, rerank_depth=20),
              metrics={"ndcg@10": 0.5})
    r = SweepResults(
        dataset=DatasetInfo(name="tiny <&>", path="x", fingerprint="f", n_documents=1, n_queries=1),
        versions=Versions(ragopt="0", python="3"), objective="o", trials=[t], selected="only",
        verdicts={"only": evaluate_gates(t, [])},
    )
    paths = write_outputs(r, tmp_path)
    page = paths["html"].read_text()
    check_html(page)
    assert "tiny &lt;&amp;&gt;" in page and "<svg" not in page and "rerank_depth" in page
    assert "rerank_depth" in paths["csv"].read_text().splitlines()[0]


@pytest.mark.skipif(not CHROMIUM.exists() or shutil.which("chromium") is None, reason="no /usr/bin/chromium")
def test_report_renders_in_headless_chromium(tmp_path):
    mpimg = pytest.importorskip("matplotlib.image")
    results, latencies = make_results(with_latencies=True)
    html_path = write_outputs(results, tmp_path / "out", latencies)["html"]
    shot = tmp_path / "shot.png"
    cmd = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1280,2000",
        html_path.resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert shot.exists(), proc.stderr[-2000:]
    assert shot.stat().st_size > 50_000  # a page of plots, not a blank PNG
    img = mpimg.imread(shot)
    assert img.shape[0] == 2000 and img.shape[1] == 1280
    flat = img[..., :3].reshape(-1, 3)
    assert flat.std(axis=0).max() > 0.05  # not a single colour
    sample = flat[:: 97]
    assert len({tuple(px) for px in sample.round(2).tolist()}) > 50  # many colours: text, lines, markers
    # the plots are in the top 2000 px: the blue of the first series appears somewhere
    blue = (abs(flat[:, 0] - 0x25 / 255) < 0.05) & (abs(flat[:, 1] - 0x63 / 255) < 0.05) & (
        abs(flat[:, 2] - 0xEB / 255) < 0.05)
    assert blue.sum() > 200
