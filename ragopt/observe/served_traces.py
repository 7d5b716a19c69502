"""`ragopt serve`'s request traces, built and sent by a child process of their own.

Building a request's spans (the OpenTelemetry SDK's attribute checks, about 0.5 ms of CPU for a three-span trace)
and encoding them to protobuf is Python work that, done by a thread of the serving process, holds the GIL the event
loop and the workers need: measured by benchmarks/bench_tracing.py, it added 1-5% to a short request's p50. Here the
serving process only hands each answer over (pickled by a multiprocessing queue's feeder thread), and the child runs
the same `Tracing.export_served` that the JSONL-equivalent figures come from, at a lower CPU priority (nice 10), so
that where it competes with serving for a core the kernel runs serving first. A full queue or a dead child loses
traces, counted in `dropped`, never requests.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import signal
import time
from typing import Any, Mapping

from ragopt.observe.settings import OtlpSettings

SERVED_QUEUE = 10_000  # answers waiting for the exporter process; beyond it a trace is dropped, counted
EXPORTER_NICENESS = 10
PARENT_CHECK_S = 1.0  # how often the child looks whether serve is still there (a SIGKILLed serve leaves no None)
log = logging.getLogger(__name__)


def _export_until_told(settings: OtlpSettings, jobs: Any, replies: Any, parent: int) -> None:
    """The child: export each queued answer; on ("flush", n) reply (n, sent, failures since the last reply); stop on
    None (after sending what is held; reply n = -1), on SIGTERM, or when serve is gone. Ctrl-C is serve's to handle:
    it tells the child when to stop. SIGTERM is obeyed (queued answers are still sent): multiprocessing terminates
    a daemon child at interpreter exit and then joins it, so a child that ignored it would hang its parent forever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    told_to_stop = []
    signal.signal(signal.SIGTERM, lambda signum, frame: told_to_stop.append(signum))
    try:  # background work: where it competes with serving for a core, the kernel runs serving first
        os.nice(EXPORTER_NICENESS)
    except OSError:
        pass
    from ragopt.observe.otel import Tracing

    tracing = Tracing(settings)
    failed = 0
    while os.getppid() == parent:
        try:
            job = jobs.get(timeout=0 if told_to_stop else PARENT_CHECK_S)
        except queue.Empty:
            if told_to_stop:
                break
            continue
        if job is None:
            break
        if job[0] == "flush":
            replies.put((job[1], tracing.flush(), failed))
            failed = 0
            continue
        out, question, headers, end_ns = job
        try:
            tracing.export_served(out, question, headers, end_ns=end_ns)
        except Exception:  # noqa: BLE001 - a trace that cannot be built is lost, visibly; the answer was sent
            failed += 1
            log.warning("a served trace could not be exported", exc_info=True)
    tracing.shutdown()
    replies.put((-1, True, failed))


class ServedTraces:
    """What serve's app calls: `export_served_later(out, question, headers)` per answered request, `flush` and
    `shutdown`. The exporter process starts with this object (spawned: serve's threads are not forked)."""

    def __init__(self, settings: OtlpSettings):
        self.settings = settings
        context = multiprocessing.get_context("spawn")
        self._jobs = context.Queue(SERVED_QUEUE)
        self._replies = context.Queue()
        self._process = context.Process(target=_export_until_told, name="ragopt-trace-exporter", daemon=True,
                                        args=(settings, self._jobs, self._replies, os.getpid()))
        self._process.start()
        self.dropped = 0  # traces not exported: the queue was full, or building them failed
        self._flushes = 0

    def export_served_later(self, out: dict[str, Any], question: str, headers: Mapping[str, str]) -> None:
        """Queue a served answer for the exporter process, its end time taken now."""
        try:
            self._jobs.put_nowait((out, question, dict(headers), time.time_ns()))
        except queue.Full:
            self.dropped += 1

    def _reply(self, wanted: int, timeout_s: float) -> bool:
        """Wait for the child's reply to request `wanted`, passing over late replies to flushes that timed out."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                n, sent, failed = self._replies.get(timeout=left)
            except queue.Empty:
                return False
            self.dropped += failed
            if n == wanted:
                return bool(sent)
        return False

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Build and send every answer queued so far; False when that did not finish within `timeout_s` (a slow or
        gone receiver) or the exporter process is gone."""
        if not self._process.is_alive():
            return False
        self._flushes += 1
        self._jobs.put(("flush", self._flushes))
        return self._reply(self._flushes, timeout_s)

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Send what is queued, then stop the exporter process (killed if it takes longer than `timeout_s`)."""
        if self._process.is_alive():
            self._jobs.put(None)
            self._reply(-1, timeout_s)
        self._process.join(timeout_s)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
