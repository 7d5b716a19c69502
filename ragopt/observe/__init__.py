"""Exporters that read the objects ragopt's own figures come from (ragopt.trace's Trace and Span, a sweep's
SweepResults) and send them where teams already look:

- `settings`: is trace export switched on (the standard OTEL_* variables or `--otlp`), and are its values sound;
  imports nothing heavy, so every command may ask.
- `otel`: request traces over OTLP/HTTP, in OpenTelemetry GenAI names with OpenInference span kinds (imports the
  OpenTelemetry SDK: only when export is on).
- `semconv`: which stage is which kind of operation, and its attributes (plain Python).
- `mlflow_runs`: a sweep as one MLflow parent run with a child run per trial (imports the MLflow client).

The JSONL traces, results.json and the Prometheus metrics stay the source of truth; nothing here changes them.
"""
