"""serve's exporter process: the serving process hands answers over and never builds a span itself; the child
sends them to a real receiver (MLflow) and goes away with serve, however serve ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("mlflow")

ROOT = Path(__file__).resolve().parents[2]

# A served answer as `ragopt serve` returns it (the fields Tracing.export_served reads), then `count` of them handed
# over, flushed, shut down; prints whether this process ever imported the SDK's spans (the settings check finds the
# packages with find_spec, which imports the parent packages only) and what was dropped.
HAND_OVER = """
import json, sys
from ragopt.observe.served_traces import ServedTraces
from ragopt.observe.settings import otlp_settings
from ragopt.trace import Span
endpoint, experiment, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_HEADERS": f"x-mlflow-experiment-id={experiment}"}
traces = ServedTraces(otlp_settings(None, False, "serve", env))
spans = [Span(name="bm25", kind="RETRIEVER", start_ms=0.1, ms=1.5, items_out=3).model_dump(),
         Span(name="extractive", answered=True, start_ms=1.7, ms=2.0, items_in=3).model_dump()]
for i in range(count):
    out = {"answer": "a", "trace": {"tenant": "north", "total_ms": 4.0 + i, "degraded": [], "spans": spans}}
    traces.export_served_later(out, "q", {})
flushed = traces.flush(timeout_s=60)
traces.shutdown()
print(json.dumps({"flushed": flushed, "dropped": traces.dropped, "sdk_here": "opentelemetry.sdk.trace" in sys.modules}))
"""

# Starts the exporter, prints its pid, then waits to be killed.
WAIT = """
import os, sys, time
from ragopt.observe.served_traces import ServedTraces
from ragopt.observe.settings import otlp_settings
traces = ServedTraces(otlp_settings(None, False, "serve", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}))
print(traces._process.pid, flush=True)
time.sleep(600)
"""


# Starts the exporter, waits until it runs (it has niced itself, after setting its signal handlers), then leaves
# without shutdown(), as a caller whose code failed would.
FORGET = """
import os, time
from ragopt.observe.served_traces import ServedTraces
from ragopt.observe.settings import otlp_settings
traces = ServedTraces(otlp_settings(None, False, "serve", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}))
pid = traces._process.pid
while os.getpriority(os.PRIO_PROCESS, pid) == os.getpriority(os.PRIO_PROCESS, 0):
    time.sleep(0.05)
print(pid, flush=True)
"""


def _python(code: str, *args: str, **kwargs: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=subprocess.PIPE, text=True, **kwargs)  # type: ignore[call-overload]


def test_the_serving_process_hands_answers_over_and_the_child_sends_them(mlflow_url: str) -> None:
    import mlflow

    experiment = mlflow.MlflowClient(mlflow_url).create_experiment(f"handover-{uuid.uuid4().hex[:8]}")
    proc = _python(HAND_OVER, mlflow_url, experiment, "3")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    report = json.loads(out.strip().splitlines()[-1])
    assert report == {"flushed": True, "dropped": 0, "sdk_here": False}  # spans built in the child only
    mlflow.set_tracking_uri(mlflow_url)
    traces = mlflow.search_traces(locations=[experiment], return_type="list")
    roots = sorted(next(s for s in t.data.spans if s.parent_id is None).attributes["ragopt.total_ms"] for t in traces)
    assert roots == [4.0, 5.0, 6.0]
    assert all(len(t.data.spans) == 3 for t in traces)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie (reaped by nobody yet) is gone too: it no longer runs
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        return f.read().split(") ")[-1].startswith("Z")


def test_the_exporter_runs_niced_and_a_killed_serve_leaves_none_behind() -> None:
    proc = _python(WAIT, start_new_session=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    assert not _gone(child)
    # the exporter is background work: it lowers its own CPU priority once started
    wanted = min(os.getpriority(os.PRIO_PROCESS, proc.pid) + 10, 19)
    deadline = time.monotonic() + 30
    while os.getpriority(os.PRIO_PROCESS, child) != wanted and time.monotonic() < deadline:
        time.sleep(0.1)
    assert os.getpriority(os.PRIO_PROCESS, child) == wanted
    proc.send_signal(signal.SIGKILL)  # no shutdown, no None in the queue: the child must notice by itself
    proc.wait()
    deadline = time.monotonic() + 10
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(child)


def test_a_caller_that_never_shuts_down_still_exits() -> None:
    # multiprocessing terminates a daemon child at interpreter exit and then joins it: the child must obey SIGTERM
    proc = _python(FORGET)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the interpreter hung at exit, joining its exporter process")
    assert proc.returncode == 0 and _gone(int(out.strip()))
