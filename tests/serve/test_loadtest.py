"""`ragopt loadtest` against a real service on loopback: every request accounted for (ok, 429, timed out,
error), percentiles, Little's law, cost per tenant, the HTML page; and the CLI's --json contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
    from ragopt.backends.llama_server import free_port

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
