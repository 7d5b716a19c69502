"""The README's main job end to end, as a user runs it: `ragopt sweep` on the shipped hospital set with the
shipped config (extractive answers, convex fusion, tenant data), in a fresh process and a fresh workspace, at
the selected K only (K = 5: the full K grid adds minutes and no new code path), then again warm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "pipelines" / "hospital-sweep.toml"


def sweep(tmp_path: Path, out: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAGOPT_HOME": str(tmp_path / "ws")}
    cmd = [sys.executable, "-m", "ragopt", "sweep", "--config", str(CONFIG), "--top-k", "5", "--out", str(tmp_path / out),
           "--no-progress", *extra]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)


@pytest.mark.slow
def test_the_main_job_selects_the_cheapest_passing_trial_and_writes_its_outputs(tmp_path: Path) -> None:
    cold = sweep(tmp_path, "cold")
    assert cold.returncode == 0, cold.stderr[-3000:]
    out = tmp_path / "cold"
    assert {p.name for p in out.iterdir()} >= {"results.json", "results.csv", "summary.md", "report.html"}
    results = json.loads((out / "results.json").read_text())
    trials = {t["id"]: t for t in results["trials"]}
    assert len(trials) == 4 * 4  # chunks of 64, 128, 256 and whole x dense, bm25, hybrid rrf, hybrid convex
    selected = trials[results["selected"]]
    assert all(v["passed"] for v in results["verdicts"][selected["id"]])
    passing = [t for t in trials.values() if all(v["passed"] for v in results["verdicts"][t["id"]])]
    assert selected["costs"]["context_tokens"] == min(t["costs"]["context_tokens"] for t in passing)
    # what the README reports: small chunks and hybrid retrieval at a fraction of whole documents' tokens
    assert selected["params"]["chunker"] == "64/16" and selected["params"]["retriever"] == "hybrid"
    whole = trials["whole_hybrid-rrf_k5"]["costs"]["context_tokens"]
    assert selected["costs"]["context_tokens"] < whole / 2
    assert {"citation_precision", "citation_recall", "string_presence", "rouge_l"} <= set(selected["metrics"])
    assert f"selected: {results['selected']}" in cold.stdout and results["selected"] in (out / "summary.md").read_text()

    warm = sweep(tmp_path, "warm")  # a fresh process on the same workspace: served from it
    assert warm.returncode == 0, warm.stderr[-3000:]
    again = json.loads((tmp_path / "warm" / "results.json").read_text())
    assert again["selected"] == results["selected"]
    assert {t["id"]: t["metrics"] for t in again["trials"]} == {t: trials[t]["metrics"] for t in trials}
    assert all(t["costs"]["latency_cached"] for t in again["trials"])
