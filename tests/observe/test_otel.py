"""Request traces out of `ragopt serve` into real receivers, read back through their own clients: MLflow (`ragopt
serve` as a subprocess, switched on by the OTEL_* variables alone) and Phoenix (the app in-process, a caller's
traceparent joined); a receiver killed mid-run loses traces, never requests. The figures in the receivers must
equal the ones in ragopt's own response trace."""

from __future__ import annotations

import json
import uuid
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("mlflow")

from fixtures.receivers import receiver, stop  # noqa: E402
from fixtures.serving import KEYS, serve_process, served_plan, uvicorn_server  # noqa: E402
from fixtures.tiny_corpus import TINY_QUERIES, write_beir  # noqa: E402

STAFF = {"Authorization": "Bearer key-acme-staff"}
QUESTIONS = [q["text"] for q in TINY_QUERIES[:3]]
ASK_STAGES = {"bm25", "prompt", "generate", "attribute"}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("observe-serve")
    keys = root / "keys.json"
    keys.write_text(json.dumps(KEYS), encoding="utf-8")
    return {"dataset": write_beir(root / "tiny"), "keys": keys, "ws": root / "ws"}


def _ask(url: str, question: str, headers: dict[str, str] | None = None, stream: bool = False) -> dict[str, Any]:
    body = {"question": question, "realtime": True, "stream": stream}
    if not stream:
        r = httpx.post(f"{url}/v1/ask", json=body, headers={**STAFF, **(headers or {})}, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()
    with httpx.stream("POST", f"{url}/v1/ask", json=body, headers={**STAFF, **(headers or {})}, timeout=120) as r:
        assert r.status_code == 200
        done = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:") and '"trace"' in line]
    return done[-1]


def _check_stages(out: dict[str, Any], children: list[tuple[str, dict[str, Any]]]) -> None:
    """One child span per stage of the response trace, in GenAI / OpenInference names, the same figures."""
    spans = out["trace"]["spans"]
    assert sorted(a["ragopt.stage"] for _, a in children) == sorted(s["name"] for s in spans)
    by_stage = {a["ragopt.stage"]: (kind, a) for kind, a in children}
    assert by_stage["bm25"][0] == "RETRIEVER" and by_stage["bm25"][1]["gen_ai.operation.name"] == "retrieval"
    assert by_stage["bm25"][1]["gen_ai.request.top_k"] == next(s for s in spans if s["name"] == "bm25")["items_out"]
    assert by_stage["prompt"][0] == "CHAIN" and "gen_ai.operation.name" not in by_stage["prompt"][1]
    kind, chat = by_stage["generate"]
    generate = next(s for s in spans if s["name"] == "generate")["usage"]
    assert kind == "LLM" and chat["gen_ai.operation.name"] == "chat"
    assert chat["gen_ai.usage.input_tokens"] == generate["tokens_in"] > 0
    assert chat["gen_ai.usage.output_tokens"] == generate["tokens_out"] > 0
    assert chat["gen_ai.usage.cache_read.input_tokens"] == generate["attrs"]["reused_tokens"]
    assert chat["gen_ai.response.time_to_first_chunk"] * 1000 == pytest.approx(generate["attrs"]["ttft_ms"], rel=1e-12)
    assert chat["gen_ai.response.finish_reasons"] == [generate["attrs"]["finish_reason"]]
    assert chat["gen_ai.request.model"] == "tiny-llama.gguf"


def _check_root(out: dict[str, Any], root: dict[str, Any]) -> None:
    trace = out["trace"]
    assert root["ragopt.ttft_ms"] == trace["ttft_ms"] and root["ragopt.total_ms"] == trace["total_ms"]
    assert root["ragopt.tokens_in"] == trace["tokens_in"] and root["ragopt.tokens_out"] == trace["tokens_out"]
    assert root["ragopt.queue_ms"] == trace["queue_ms"]
    assert root["ragopt.tenant"] not in ("", "acme") and len(root["ragopt.tenant"]) == 16  # hashed, never named


def test_serve_exports_each_request_to_mlflow_from_the_otel_variables_alone(
        tiny_gguf: Path, files: dict[str, Path], mlflow_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow

    experiment = mlflow.MlflowClient(mlflow_url).create_experiment(f"serve-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{mlflow_url}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"x-mlflow-experiment-id={experiment}")
    args = ["--dataset", str(files["dataset"]), "--api-keys", str(files["keys"]), "--model", str(tiny_gguf),
            "--retriever", "bm25", "--top-k", "3", "--max-tokens", "8", "--n-ctx", "4096", "--no-cache"]
    with serve_process(args, files["ws"]) as url:
        outs = [_ask(url, q) for q in QUESTIONS]
    # stopped: serve sent what was queued on its way out
    mlflow.set_tracking_uri(mlflow_url)
    traces = mlflow.search_traces(locations=[experiment], return_type="list")
    assert len(traces) == len(QUESTIONS)
    roots = {}
    for t in traces:
        (root,) = [s for s in t.data.spans if s.parent_id is None]
        roots[root.attributes["ragopt.total_ms"]] = (root, [s for s in t.data.spans if s.parent_id is not None])
    for out in outs:
        root, children = roots[out["trace"]["total_ms"]]
        assert root.name == "ragopt serve"
        _check_root(out, root.attributes)
        _check_stages(out, [(c.attributes["openinference.span.kind"], c.attributes) for c in children])
        assert "input.value" not in root.attributes  # questions only when the user opts in


@contextmanager
def _app(tiny_gguf: Path, files: dict[str, Path], env: dict[str, str], content: bool = False) -> Iterator[tuple[str, Any]]:
    """The serve app in-process on a real uvicorn, exporting with the settings `env` gives."""
    from ragopt.observe.served_traces import ServedTraces
    from ragopt.observe.settings import otlp_settings
    from ragopt.serve.app import create_app, load_api_keys
    from ragopt.serve.build import ServeOptions, build_service
    from ragopt.serve.service import ServeSettings

    tracing = ServedTraces(otlp_settings(None, content, "serve", env))
    opts = ServeOptions(settings=ServeSettings(), plan=served_plan(model=str(tiny_gguf), n_ctx=4096, max_tokens=8),
                        dataset=str(files["dataset"]), cache=False)
    with ExitStack() as stack:
        stack.callback(tracing.shutdown)  # also when a check inside fails
        service = build_service(opts, files["ws"], stack)
        with uvicorn_server(create_app(service, load_api_keys(files["keys"]), tracing=tracing)) as url:
            yield url, tracing


def _phoenix_spans(client: Any, project: str, want: int) -> list[dict[str, Any]]:
    """Phoenix writes received spans to its database in batches: wait (up to a minute) until `want` are there."""
    import time

    spans: list[dict[str, Any]] = []
    for _ in range(120):
        try:
            spans = client.spans.get_spans(project_identifier=project, limit=1000)
        except httpx.HTTPStatusError as exc:  # 404 until the project's first span is stored
            if exc.response.status_code != 404:
                raise
        if len(spans) >= want:
            return spans
        time.sleep(0.5)
    return spans


def test_phoenix_shows_each_stage_and_keeps_the_callers_trace(tiny_gguf: Path, files: dict[str, Path], phoenix_url: str) -> None:
    from phoenix.client import Client

    project = f"ragopt-{uuid.uuid4().hex[:8]}"
    caller_trace, caller_span = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": phoenix_url, "OTEL_SERVICE_NAME": project}
    with _app(tiny_gguf, files, env, content=True) as (url, tracing):
        joined = _ask(url, QUESTIONS[0], {"traceparent": f"00-{caller_trace}-{caller_span}-01"})
        streamed = _ask(url, QUESTIONS[1], stream=True)
        assert tracing.flush()
    spans = _phoenix_spans(Client(base_url=phoenix_url), project, want=2 * (1 + len(joined["trace"]["spans"])))
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        by_trace.setdefault(s["context"]["trace_id"], []).append(s)
    assert len(by_trace) == 2 and caller_trace in by_trace
    for out, question in ((joined, QUESTIONS[0]), (streamed, QUESTIONS[1])):
        (trace_spans,) = [v for v in by_trace.values() if any(
            s["attributes"].get("ragopt.total_ms") == out["trace"]["total_ms"] for s in v)]
        (root,) = [s for s in trace_spans if s["name"] == "ragopt serve"]
        _check_root(out, root["attributes"])
        assert root["span_kind"] == "CHAIN" and root["attributes"]["input.value"] == question  # opted in
        assert root["attributes"]["output.value"] == out["answer"]
        children = [s for s in trace_spans if s is not root]
        assert all(c["parent_id"] == root["context"]["span_id"] for c in children)
        _check_stages(out, [(c["span_kind"], c["attributes"]) for c in children])
    joined_root = next(s for s in by_trace[caller_trace] if s["name"] == "ragopt serve")
    assert joined_root["parent_id"] == caller_span


def _flushed_traces(tracing: Any, want: int) -> list[Any]:
    """Flush until MLflow's default experiment holds `want` traces (up to 30 s): a trace is handed to the exporter
    just after its answer, so a flush sent the moment the reply arrives can come before it."""
    import time

    import mlflow

    traces: list[Any] = []
    for _ in range(150):
        assert tracing.flush()
        traces = mlflow.search_traces(locations=["0"], return_type="list")
        if len(traces) >= want:
            break
        time.sleep(0.2)
    return traces


def test_a_receiver_killed_mid_run_loses_traces_never_requests(tiny_gguf: Path, files: dict[str, Path], tmp_path: Path) -> None:
    import mlflow

    with receiver("mlflow", tmp_path / "mlflow") as (mlflow_url, proc):
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": mlflow_url, "OTEL_EXPORTER_OTLP_HEADERS": "x-mlflow-experiment-id=0"}
        with _app(tiny_gguf, files, env) as (url, tracing):
            before = [_ask(url, q) for q in QUESTIONS[:2]]
            mlflow.set_tracking_uri(mlflow_url)
            assert len(_flushed_traces(tracing, want=2)) == 2
            stop(proc)
            after = [_ask(url, q, stream=i % 2 == 1) for i, q in enumerate(QUESTIONS)]
            tracing.flush(timeout_s=10)  # the exporter gives these up; nothing reaches the requests
    assert all(out["answer"] and out["trace"]["tokens_out"] > 0 for out in before + after)


def test_a_sweep_exports_each_query_it_ran_with_the_judges_verdicts_as_events(tiny_beir: Path, tmp_path: Path,
                                                                            phoenix_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from phoenix.client import Client

    from ragopt.cli import main

    project = f"sweep-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("OTEL_SERVICE_NAME", project)
    out = tmp_path / "out"
    assert main(["--workspace", str(tmp_path / "ws"), "sweep", "--dataset", str(tiny_beir), "--retrievers", "bm25",
                 "--chunk-sizes", "whole", "--top-k", "1,3", "--set", "generate.generator=extractive", "--judge", "support",
                 "--out", str(out), "--otlp", phoenix_url, "--no-progress"]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    n_traces = len(results["trials"]) * len(results["query_ids"])
    spans = _phoenix_spans(Client(base_url=phoenix_url), project, want=n_traces * 3)
    roots = [s for s in spans if s["name"] == "ragopt sweep"]
    assert len(roots) == n_traces
    checked = 0
    for root in roots:
        trial = next(t for t in results["trials"] if t["id"] == root["attributes"]["ragopt.trial"])
        i = results["query_ids"].index(root["attributes"]["ragopt.query_id"])
        (answering,) = [s for s in spans if s["parent_id"] == root["context"]["span_id"] and s["events"]]
        verdicts = {e["attributes"]["gen_ai.evaluation.name"]: e["attributes"]["gen_ai.evaluation.score.value"]
                    for e in answering["events"] if e["name"] == "gen_ai.evaluation.result"}
        expected = {name: trial["per_query"][name][i] for name in trial["intervals"] if trial["per_query"][name][i] is not None}
        assert verdicts == expected and "faithfulness" in expected
        checked += 1
    assert checked == n_traces


def test_eval_and_ask_export_their_requests_too(tiny_beir: Path, tmp_path: Path, phoenix_url: str,
                                                 monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from phoenix.client import Client

    from ragopt.cli import main

    project = f"eval-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("OTEL_SERVICE_NAME", project)
    common = ["--dataset", str(tiny_beir), "--retriever", "bm25", "--otlp", phoenix_url]
    assert main(["--workspace", str(tmp_path / "ws"), "eval", *common, "--json"]) == 0
    n_queries = json.loads(capsys.readouterr().out)["n_queries"]
    assert main(["--workspace", str(tmp_path / "ws"), "ask", *common, "--extractive", "--trace-content", QUESTIONS[0]]) == 0
    spans = _phoenix_spans(Client(base_url=phoenix_url), project, want=3 * n_queries + 4)
    roots = {s["name"]: [r for r in spans if r["name"] == s["name"]] for s in spans if s["parent_id"] is None}
    assert len(roots["ragopt eval"]) == n_queries and len(roots["ragopt ask"]) == 1
    assert roots["ragopt ask"][0]["attributes"]["input.value"] == QUESTIONS[0]
    assert all("input.value" not in r["attributes"] for r in roots["ragopt eval"])  # not opted in
