"""`ragopt loadtest` against a real service on loopback: every request accounted for (ok, 429, timed out,
error), percentiles, Little's law, cost per tenant, the HTML page; and the CLI's --json contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragopt.serve.build import ServeOptions
from ragopt.serve.loadtest import LoadSpec, run
from ragopt.serve.loadtest_report import write_html
from ragopt.serve.service import PriceTable, ServeSettings

from fixtures.serving import running_service, served_plan

CONTRACT = ("sent", "ok", "rate_limited", "timed_out", "errors", "latency_ms", "ttft_ms", "littles_law")


def test_poisson_load_accounts_for_every_request(tiny_gguf: Path, serve_files: dict[str, Path], tmp_path: Path) -> None:
    settings = ServeSettings(key_rate_per_s=2, key_burst=2, price=PriceTable(input_per_1k=0.5, output_per_1k=1.5))
    opts = ServeOptions(settings=settings, plan=served_plan(model=str(tiny_gguf), n_ctx=2048, max_tokens=8),
                        dataset=str(serve_files["dataset"]))
    with running_service(opts, tmp_path, serve_files["keys"]) as (url, _):
        spec = LoadSpec(url=url, api_keys=("key-acme-staff", "key-beta"), duration_s=3, rate=20, timeout_s=30, seed=3)
        report = run(spec, progress_bar=False)
    assert report["sent"] == report["ok"] + report["rate_limited"] + report["timed_out"] + report["errors"] > 0
    assert report["lost"] == 0 and report["errors"] == 0
    assert report["rate_limited"] > 0 and report["ok"] > 0  # 20/s offered against 2 keys x 2/s
    for key in ("latency_ms", "ttft_ms"):
        assert report[key]["p50"] <= report[key]["p95"] <= report[key]["p99"]
    ll = report["littles_law"]
    assert ll["predicted_in_flight"] > 0 and ll["measured_in_flight"] > 0
    assert set(report["cost_by_tenant"]) == {"acme", "beta"}
    assert report["cost_per_request"] > 0 and 0 < report["cache_hit_rate"] < 1
    assert sum(t["saved_cost"] for t in report["cost_by_tenant"].values()) > 0  # hits cost nothing, and say what they saved
    assert {r["kind"] for r in report["requests"]} == {"short", "long"}
    page = tmp_path / "report.html"
    write_html(report, page)
    text = page.read_text()
    assert text.count("<svg") == 2 and "Little" in text


def test_cli_json_contract(tmp_path: Path) -> None:
    """A real subprocess; nothing listens on the port, so every request is an error, and all are counted."""
    from ragopt.backends.child_server import free_port

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-m", "ragopt", "loadtest", "--url", f"http://127.0.0.1:{free_port()}",
                           "--api-key", "k", "--duration", "30", "--concurrency", "2", "--max-requests", "4", "--json",
                           "--no-progress"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert all(k in report for k in CONTRACT)
    assert report["sent"] == report["errors"] == 4
    for key in ("latency_ms", "ttft_ms"):
        assert "n" in report[key]
    assert {"predicted_in_flight", "measured_in_flight"} <= set(report["littles_law"])


@pytest.mark.parametrize("args, flag", [
    (["loadtest", "--url", "http://127.0.0.1:9", "--api-key", "k", "--duration", "1", "--rate", "-1"], "--rate"),
    (["loadtest", "--url", "http://127.0.0.1:9", "--api-key", "k", "--duration", "1", "--rate", "1", "--long-fraction", "2"], "--long-fraction"),
    (["loadtest", "--url", "127.0.0.1:9", "--api-key", "k", "--duration", "1", "--rate", "1"], "--url"),
    (["loadtest", "--url", "http://127.0.0.1:9", "--api-key", "k", "--duration", "1", "--rate", "1", "--html", "{tmp}/no/x.html"], "--html"),
    (["serve", "--api-keys", "{tmp}/none.json"], "--api-keys"),
    (["serve", "--api-keys", "{tmp}", "--port", "70000"], "--port"),
    (["serve", "--api-keys", "{tmp}", "--model", "{tmp}/none.gguf"], "--model"),
    (["serve", "--api-keys", "{tmp}", "--engine", "http"], "--backend-url"),
    (["serve", "--api-keys", "{tmp}", "--max-tokens", "4096"], "--max-tokens"),
    (["serve", "--api-keys", "{tmp}", "--key-rate", "0"], "--key-rate"),
])  # fmt: skip
def test_bad_flags_are_one_line_and_exit_2(args: list[str], flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ragopt.cli import main

    code = main(["--workspace", str(tmp_path / "ws"), *(a.replace("{tmp}", str(tmp_path)) for a in args)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and flag in err[0], err


def test_api_key_files_are_validated(tmp_path: Path) -> None:
    from ragopt.errors import InputError
    from ragopt.serve.app import load_api_keys

    for content, needle in (("[]", "JSON object"), ('{"k": {"scopes": []}}', "tenant"), ('{"k": {"tenant": "a", "scopes": "x"}}', "scopes"),
                            ('{"k": {"tenant": "a", "role": "x"}}', "role"), ("{", "invalid JSON")):
        path = tmp_path / "keys.json"
        path.write_text(content)
        with pytest.raises(InputError, match=needle):
            load_api_keys(path)
    path.write_text('{"secret-key": {"tenant": "a", "scopes": ["y", "x", "x"]}}')
    principal = load_api_keys(path)["secret-key"]
    assert principal.scopes == ("x", "y") and "secret" not in principal.key_id


def _extractive(dataset: Path) -> ServeOptions:
    return ServeOptions(settings=ServeSettings(key_rate_per_s=500, key_burst=500, tenant_rate_per_s=500, tenant_burst=500),
                        plan=served_plan("extractive"), dataset=str(dataset), cache=False)


def test_tenants_load_side_by_side_with_figures_per_tenant_and_jain(tiny_gguf: Path, serve_files: dict[str, Path], tmp_path: Path) -> None:
    from ragopt.serve.loadspec import TenantLoad

    opts = ServeOptions(settings=ServeSettings(key_rate_per_s=500, key_burst=500),
                        plan=served_plan(model=str(tiny_gguf), n_ctx=2048, max_tokens=8), dataset=str(serve_files["dataset"]),
                        cache=False)
    tenants = (TenantLoad("steady", "key-acme-staff", concurrency=2), TenantLoad("poisson", "key-beta", rate=4, weight=2.0,
                                                                               questions=("What makes bread dough rise?",)))
    with running_service(opts, tmp_path, serve_files["keys"]) as (url, _):
        report = run(LoadSpec(url=url, api_keys=(), duration_s=2, tenants=tenants, timeout_s=30), progress_bar=False)
    parts = report["tenants"]
    assert set(parts) == {"steady", "poisson"} and report["mode"] == "tenants"
    assert report["sent"] == sum(p["sent"] for p in parts.values()) == report["ok"] + report["errors"] + report["rate_limited"]
    assert all(p["ok"] > 0 and p["ttft_ms"]["n"] == p["ok"] for p in parts.values())
    assert set(parts["poisson"]["cost_by_tenant"]) == {"beta"} and parts["poisson"]["weight"] == 2.0
    served = [(p["tokens_in_total"] + p["tokens_out_total"]) / p["weight"] for p in parts.values()]
    assert all(x > 0 for x in served)
    assert report["jain_index"] == pytest.approx(sum(served) ** 2 / (2 * sum(x * x for x in served)))
    page = tmp_path / "tenants.html"
    write_html(report, page)
    assert "Jain" in page.read_text()


def test_jain_index() -> None:
    from ragopt.serve.loadtest import jain_index

    assert jain_index([3.0, 3.0]) == 1.0
    assert jain_index([1.0, 0.0]) == 0.5  # one tenant gets everything: 1/n
    assert jain_index([0.0, 0.0]) is None


def _report_of(ttfts_ms: list[float]) -> dict[str, Any]:
    """One load run's report, as far as the capacity search reads it: every request answered, with these TTFTs."""
    n = len(ttfts_ms)
    return {"sent": n, "ok": n, "rate_limited": 0, "refused": 0, "timed_out": 0, "errors": 0, "offered_qps": 1.0,
            "achieved_qps": 1.0, "error_rate": 0.0, "ttft_ms": {"p95": float(np.percentile(ttfts_ms, 95))},
            "requests": [{"status": "ok", "ttft_ms": t} for t in ttfts_ms],
            "littles_law": {"ratio": 1.0, "in_flight_at_close": 1, "measured_in_flight": 1.0}}


def test_capacity_search_brackets_the_rate_where_the_slo_breaks() -> None:
    from dataclasses import replace as _replace

    from ragopt.serve.slo import SearchPlan, parse_slo, search_capacity

    spec = LoadSpec(url="http://127.0.0.1:9", api_keys=("k",), duration_s=1)
    # an M/M/1-like service: p95 TTFT grows as 1 / (capacity - rate); p95 <= 500 ms holds up to 3.0 req/s
    seen: list[float] = []

    def step(s: LoadSpec) -> dict[str, Any]:
        seen.append(s.rate)
        return _report_of([1000 / (5.0 - s.rate) if s.rate < 5.0 else 1e9] * 20)

    out = search_capacity(_replace(spec), [parse_slo("p95_ttft_ms<=500")], SearchPlan(start_rps=0.5, max_rps=64, repeats=2, refine=4), step)
    low, high = out["interval_rps"]
    assert low == out["capacity_rps"] and low <= 3.0 < high and high - low <= 4.0 / 16
    assert seen[:6] == [0.5, 0.5, 1.0, 1.0, 2.0, 2.0]  # doubling, each rate repeated
    assert all(s["met"] == (s["rate_rps"] <= 3.0) for s in out["steps"])
    assert out["littles_law_within_10pct"] and not out["capped_at_max"]


def test_a_step_is_judged_on_the_requests_of_all_its_repeats_together() -> None:
    from ragopt.serve.slo import SearchPlan, parse_slo, search_capacity

    # At 1 req/s one repeat has 6 slow requests in 100 (its own p95 misses 500 ms), the other none: over the 200
    # requests together the p95 is 100 ms, so the step meets the SLO. At 2 req/s both repeats are slow.
    runs = {1.0: [[100.0] * 94 + [1000.0] * 6, [100.0] * 100], 2.0: [[100.0] * 90 + [1000.0] * 10] * 2}
    calls: dict[float, int] = {}

    def step(s: LoadSpec) -> dict[str, Any]:
        k = calls[s.rate] = calls.get(s.rate, -1) + 1
        return _report_of(runs[s.rate][k])

    out = search_capacity(LoadSpec(url="http://127.0.0.1:9", api_keys=("k",), duration_s=1), [parse_slo("p95_ttft_ms<=500")],
                          SearchPlan(start_rps=1.0, max_rps=2.0, repeats=2, refine=0), step)
    first, second = out["steps"]
    assert [r["met"] for r in first["repeats"]] == [False, True] and first["met"]
    assert first["values"]["p95_ttft_ms<=500"] == 100.0
    assert not second["met"] and out["capacity_rps"] == 1.0 and out["interval_rps"] == [1.0, 2.0]


def test_slo_expressions(tmp_path: Path) -> None:
    from ragopt.errors import InputError
    from ragopt.serve.slo import parse_slo

    slo = parse_slo(" p95_ttft_ms <= 2000 ")
    assert (slo.metric, slo.op, slo.bound) == ("p95_ttft_ms", "<=", 2000.0)
    assert parse_slo("error_rate<0.01").met({"error_rate": 0.0})
    for bad in ("p95_ttft_ms=<2000", "p97_ttft_ms<=1", "error_rate<=2", "p95_ttft_ms<=-1", "p95_ttft_ms<=fast"):
        with pytest.raises(InputError, match=r"\[--slo\]"):
            parse_slo(bad)


def test_cli_capacity_contract(serve_files: dict[str, Path], tmp_path: Path) -> None:
    """`ragopt loadtest --url --api-key --slo --duration --json` prints one JSON object with capacity_rps."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with running_service(_extractive(serve_files["dataset"]), tmp_path, serve_files["keys"]) as (url, _):
        done = subprocess.run([sys.executable, "-m", "ragopt", "loadtest", "--url", url, "--api-key", "key-beta", "--slo",
                               "p95_ttft_ms<=60000", "--duration", "1", "--json", "--slo-start", "2", "--slo-max", "8",
                               "--repeats", "1", "--refine", "1", "--html", str(tmp_path / "cap.html")],
                              capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["capacity_rps"] == 8 and report["capped_at_max"]  # every step met a 60 s p95
    assert [s["rate_rps"] for s in report["steps"]] == [2, 4, 8]
    assert "meets the SLO" in done.stderr and "Capacity" in (tmp_path / "cap.html").read_text()


LOADTEST_BAD = {
    "slo syntax": (["--slo", "p95_ttft_ms=<5"], "[--slo]"),
    "slo with rate": (["--slo", "p95_ttft_ms<=5", "--rate", "1"], "[--slo]"),
    "slo start": (["--slo", "p95_ttft_ms<=5", "--slo-start", "0"], "[--slo-start]"),
    "slo max": (["--slo", "p95_ttft_ms<=5", "--slo-start", "4", "--slo-max", "2"], "[--slo-max]"),
    "repeats": (["--slo", "p95_ttft_ms<=5", "--repeats", "0"], "[--repeats]"),
    "tenant syntax": (["--tenant", "k:fast"], "[--tenant]"),
    "tenant clients": (["--tenant", "k:c0"], "[--tenant]"),
    "tenant with rate": (["--tenant", "k:2", "--rate", "1"], "[--rate]"),
    "tenants file": (["--tenants", "{tmp}/tenants.toml"], "tenant 1: rate"),
    "tenants weight": (["--tenants", "{tmp}/weights.toml"], "weight"),
    "dataset": (["--rate", "1", "--dataset", "{tmp}/none"], "[--dataset]"),
}


@pytest.mark.parametrize("case", list(LOADTEST_BAD))
def test_bad_loadtest_settings_are_one_line(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ragopt.cli import main

    (tmp_path / "tenants.toml").write_text('[[tenant]]\nname = "a"\napi_key = "k"\nrate = -1\n')
    (tmp_path / "weights.toml").write_text('[[tenant]]\nname = "a"\napi_key = "k"\nrate = 1\nweight = 0\n')
    args, needle = LOADTEST_BAD[case]
    code = main(["loadtest", "--url", "http://127.0.0.1:9", "--api-key", "k", "--duration", "1",
                 *(a.replace("{tmp}", str(tmp_path)) for a in args)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0], err
