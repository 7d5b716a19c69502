"""Request traces over OTLP/HTTP: one root span per request, one child per stage, made from the same Trace (or
serve's response trace) that the JSONL and the response carry, so a figure in the backend equals ragopt's own.

Imported only when export is switched on (it imports the OpenTelemetry SDK). Spans go out through a
BatchSpanProcessor: a background thread sends them, so a receiver that is slow or gone loses traces, never
delays or fails a request. `ragopt serve` calls `export_served` in a child process of its own
(ragopt.observe.served_traces), so building spans never holds the serving process's GIL.
"""

from __future__ import annotations

import time
from typing import Any, Iterator, Mapping, Sequence

from opentelemetry import propagate
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

from ragopt.observe.semconv import hashed, model_name, ragopt_attrs, span_name, stage_attributes
from ragopt.observe.settings import OtlpSettings
from ragopt.trace import Span, Trace

EXPORT_TIMEOUT_S = 5.0  # per batch: a dead receiver costs the export thread this long, never a request


def placed(spans: list[Span]) -> Iterator[tuple[Span, float]]:
    """Each span with its start in ms from the request's start. A trace may join several pipelines' spans (serve:
    retrieval, then generation), each counting from its own start: a span that starts before the previous one
    begins the next pipeline, placed after the spans so far."""
    base = end = 0.0
    last = -1.0
    for span in spans:
        if span.start_ms < last:
            base = end
        last = span.start_ms
        offset = base + span.start_ms
        end = max(end, offset + span.ms)
        yield span, offset


class Tracing:
    """An OTLP exporter with its own TracerProvider (the process's global one is left alone)."""

    def __init__(self, settings: OtlpSettings):
        self.settings = settings
        detected = Resource.create({})
        resource = detected.merge(Resource({"service.name": settings.service_name}))
        if "openinference.project.name" not in detected.attributes:  # Phoenix files spans by this project
            resource = resource.merge(Resource({"openinference.project.name": settings.service_name}))
        exporter = OTLPSpanExporter(endpoint=settings.endpoint, headers=settings.headers, timeout=EXPORT_TIMEOUT_S)
        self.provider = TracerProvider(resource=resource)
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("ragopt")

    def export(self, trace: Trace, root_name: str, attrs: dict[str, Any], *, model: str | None = None,
               headers: Mapping[str, str] | None = None, server: bool = False, end_ns: int | None = None,
               content: dict[str, str] | None = None, evaluations: Sequence[dict[str, Any]] = ()) -> str:
        """One request: a root span `root_name` (joining the caller's trace when `headers` carry a traceparent)
        with a child per stage. `content` (question, answer...) is added only when the user opted in.
        `evaluations`: judge verdicts, as `gen_ai.evaluation.result` events on the span that answered (the root
        when no stage did). Returns the trace id (32 hex digits)."""
        end = end_ns if end_ns is not None else time.time_ns()
        start = end - int(trace.total_ms * 1e6)
        parent = propagate.extract({k.lower(): v for k, v in headers.items()}) if headers else None
        root_attrs = {"openinference.span.kind": "CHAIN", **attrs}
        if self.settings.content and content:
            root_attrs.update({k: v for k, v in content.items() if v is not None})
        root = self.tracer.start_span(root_name, context=parent, kind=SpanKind.SERVER if server else SpanKind.INTERNAL,
                                      attributes=root_attrs, start_time=start)
        inside = set_span_in_context(root)
        judged = next((s.name for s in reversed(trace.spans) if s.answered), None)
        for span, offset_ms in placed(trace.spans):
            begin = start + int(offset_ms * 1e6)
            child = self.tracer.start_span(span_name(span, model), context=inside, attributes=stage_attributes(span, model),
                                           start_time=begin)
            if span.error:
                child.set_status(Status(StatusCode.ERROR, span.error))
            if span.name == judged:
                for event in evaluations:
                    child.add_event("gen_ai.evaluation.result", event, timestamp=begin + int(span.ms * 1e6))
            child.end(end_time=begin + int(span.ms * 1e6))
        if trace.degraded:
            root.set_attribute("ragopt.degraded", list(trace.degraded))
        if judged is None:
            for event in evaluations:
                root.add_event("gen_ai.evaluation.result", event, timestamp=end)
        root.end(end_time=end)
        return format(root.get_span_context().trace_id, "032x")

    def export_served(self, out: dict[str, Any], question: str, headers: Mapping[str, str], *,
                      end_ns: int | None = None) -> str:
        """A `ragopt serve` answer ({"answer", "citations", "trace"}): its response trace as the root's ragopt.*
        attributes (the tenant hashed), its stage spans as children, the caller's traceparent joined."""
        served = out["trace"]
        trace = Trace(request_id="", spans=[Span.model_validate(s) for s in served["spans"]],
                      total_ms=served["total_ms"], degraded=served["degraded"])
        figures = {k: v for k, v in served.items() if k not in ("spans", "tenant", "cache", "prompt")}
        figures.update({f"cache.{k}": v for k, v in (served.get("cache") or {}).items()})
        figures.update({f"prompt.{k}": v for k, v in (served.get("prompt") or {}).items()})
        attrs = {"ragopt.tenant": hashed(served["tenant"]), **ragopt_attrs(figures)}
        content = {"input.value": question, "output.value": out.get("answer")}
        return self.export(trace, "ragopt serve", attrs, model=model_name(served.get("generator")), headers=headers, server=True,
                           content=content, end_ns=end_ns)

    def export_trace(self, trace: Trace, command: str, *, question: str | None = None, answer: str | None = None,
                     tenant: str | None = None, model: str | None = None, end_ns: int | None = None,
                     evaluations: Sequence[dict[str, Any]] = (), trial: str | None = None) -> str:
        """A request of `ragopt ask`, `eval` or a sweep's trial (a pipeline's Trace as the JSONL holds it)."""
        figures = {"request_id": trace.request_id, "query_id": trace.query_id or None, "total_ms": trace.total_ms,
                   "tokens_in": trace.tokens_in, "tokens_out": trace.tokens_out, "cache_hits": trace.cache_hits,
                   "ttft_ms": trace.attr("ttft_ms"), "trial": trial}
        attrs = ragopt_attrs(figures)
        if tenant:
            attrs["ragopt.tenant"] = hashed(tenant)
        return self.export(trace, f"ragopt {command}", attrs, model=model, end_ns=end_ns,
                           content={"input.value": question, "output.value": answer}, evaluations=evaluations)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Send every span ended so far; False when the sending timed out."""
        return self.provider.force_flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        """Send what is queued, then stop."""
        self.provider.shutdown()
