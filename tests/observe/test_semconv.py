"""A tool's span in the field's names: OpenInference span kind TOOL, GenAI operation execute_tool with the tool's
name, and ragopt's own figures (pruned tokens, what it was degraded to) beside them."""

from __future__ import annotations

from ragopt.observe.semconv import span_name, stage_attributes
from ragopt.trace import Span, Usage


def test_a_tool_span_is_a_tool_call_in_both_conventions() -> None:
    span = Span(name="tool", kind="TOOL", start_ms=0.0, ms=12.5,
                usage=Usage(attrs={"tool.name": "collection_status", "pruned_tokens": 40, "degraded": "tool_timeout -> documents only"}))
    attrs = stage_attributes(span, None)
    assert span_name(span, None) == "execute_tool collection_status"
    assert attrs["openinference.span.kind"] == "TOOL" and attrs["gen_ai.operation.name"] == "execute_tool"
    assert attrs["gen_ai.tool.name"] == attrs["tool.name"] == "collection_status"
    assert attrs["ragopt.pruned_tokens"] == 40 and attrs["ragopt.degraded"] == "tool_timeout -> documents only"
