"""The flags that send ragopt's figures where teams already look: request traces over OTLP (serve, ask, eval, sweep)
and a sweep's trials to MLflow. Nothing of ragopt.observe's exporters is imported unless one is switched on."""

from __future__ import annotations

import argparse
from typing import Any


def add_trace_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("traces out (OpenTelemetry; pip install 'ragopt[observe]')")
    g.add_argument("--otlp", metavar="URL", default=None,
                   help="send each request's trace over OTLP/HTTP, e.g. http://127.0.0.1:6006 (/v1/traces is appended); "
                        "without the flag OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT switch it on, "
                        "with OTEL_EXPORTER_OTLP_HEADERS and OTEL_SERVICE_NAME")
    g.add_argument("--trace-content", action="store_true",
                   help="put questions and answers into the exported spans (default: figures only); also "
                        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true")


def tracing(args: argparse.Namespace, command: str) -> Any:
    """When export is switched on, a ragopt.observe.otel.Tracing (serve: a ServedTraces, whose exporter runs in a
    child process), else None; a bad endpoint, header or a missing SDK is an InputError here, before any work."""
    from ragopt.observe.settings import otlp_settings

    settings = otlp_settings(args.otlp, args.trace_content, command)
    if settings is None:
        return None
    if command == "serve":
        from ragopt.observe.served_traces import ServedTraces

        return ServedTraces(settings)
    from ragopt.observe.otel import Tracing

    return Tracing(settings)


def add_mlflow_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mlflow", nargs="?", const="", default=None, metavar="TRACKING_URI",
                   help="log the sweep to an MLflow tracking server (default URI: $MLFLOW_TRACKING_URI): a parent run, a "
                        "child run per trial (params, metrics, ragopt.selected tag), the outputs as artifacts; a re-run "
                        "logs only trials not logged yet (pip install 'ragopt[observe]')")


def mlflow_uri(args: argparse.Namespace) -> str | None:
    """The tracking server --mlflow names, checked (reachable, client installed) before any work; None without it."""
    if args.mlflow is None:
        return None
    from ragopt.observe.mlflow_runs import tracking_uri

    return tracking_uri(args.mlflow or None)


def log_sweep(uri: str, results: Any, paths: dict[str, Any]) -> None:
    import sys

    from ragopt.observe.mlflow_runs import log_sweep as log

    done = log(results, paths, uri)
    print(f"mlflow: sweep run {done.parent_run_id} (experiment {done.experiment_id}): {done.logged} trial runs logged, "
          f"{done.kept} already there", file=sys.stderr)


def mlflow_trial(run_uri: str, workspace: Any) -> tuple[Any, str]:
    """--from runs:/RUN_ID: (its sweep's results.json, fetched into the workspace; the trial id)."""
    from ragopt.observe.mlflow_runs import tracking_uri, trial_of_run

    run_id = run_uri.removeprefix("runs:/").strip("/")
    return trial_of_run(run_id, tracking_uri(None, field="--from"), workspace / "mlflow" / run_id)


def trial_exporter(tracing: Any, questions: dict[str, str]) -> Any:
    """`on_trial` for run_sweep: the queries a trial ran in this process, each with its judged metrics as
    gen_ai.evaluation.result events (faithfulness explained by the sentences the judge found unsupported)."""
    import time

    from ragopt.observe.semconv import evaluation_event

    def export(trial: Any, outcomes: list[Any]) -> None:
        end = time.time_ns()
        for i in reversed(range(len(outcomes))):
            trace = outcomes[i].trace
            if trace is None:  # reused from an earlier run: nothing ran, nothing to trace
                continue
            unsupported = "; ".join(trial.unsupported.get(outcomes[i].query_id, []))
            events = [evaluation_event(name, trial.per_query[name][i], unsupported if name == "faithfulness" else None)
                      for name in trial.intervals if trial.per_query.get(name) and trial.per_query[name][i] is not None]
            tracing.export_trace(trace, "sweep", question=questions.get(outcomes[i].query_id), end_ns=end,
                                 evaluations=events, trial=trial.id)
            end -= int(trace.total_ms * 1e6)

    return export


def exit_cleanly_on_sigterm() -> None:
    """uvicorn re-raises SIGTERM once it has shut down, which would end the process before the traces still queued
    are sent: make that signal leave through the `with` blocks instead (exit 0)."""
    import signal

    def leave(signum: int, frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, leave)


def export_queries(tracing: Any, traces: list[Any], command: str, questions: dict[str, str] | None = None) -> None:
    """Export the traces of requests that ran one after another, placed back to back up to now, then send
    what is queued (the command ends next)."""
    import time

    end = time.time_ns()
    for trace in reversed(traces):
        tracing.export_trace(trace, command, question=(questions or {}).get(trace.query_id), end_ns=end)
        end -= int(trace.total_ms * 1e6)
    tracing.shutdown()


def export_answer(tracing: Any, trace: Any, question: str, answer: Any, tenant: str | None) -> None:
    """`ragopt ask`'s one request, then send it (the command ends next)."""
    from ragopt.observe.semconv import model_name

    tracing.export_trace(trace, "ask", question=question, answer=answer.text if answer else None, tenant=tenant,
                         model=model_name(answer.generator if answer else None))
    tracing.shutdown()
