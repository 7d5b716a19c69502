"""A ragopt span in the field's names: OpenTelemetry GenAI attributes where those conventions define the operation
(chat, embeddings, retrieval), an OpenInference span kind for every span (so Phoenix and MLflow show each stage
for what it is), and ragopt's own figures under `ragopt.*`. Plain Python: no SDK import.

What a stage is comes from its span's `kind`, which the stage class declares (ragopt.trace.Span.kind).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ragopt.trace import Span

# the GenAI conventions' operation for the span kinds that have one (a reranker and ragopt's own steps have none)
OPERATIONS = {"EMBEDDING": "embeddings", "RETRIEVER": "retrieval", "LLM": "chat", "TOOL": "execute_tool"}
_SCALARS = (bool, int, float, str)


def kind_of(span: Span) -> tuple[str | None, str]:
    """(operation, span kind) of a stage's span, as its stage declared it; any step that spent model tokens is an
    LLM call (an LLM rewrite, history condensing), whatever it declared."""
    kind = span.kind
    if kind == "CHAIN" and (span.usage.tokens_in or span.usage.tokens_out):
        kind = "LLM"
    return OPERATIONS.get(kind), kind


def hashed(value: str) -> str:
    """A stable pseudonymous id (a tenant is not named in a trace that leaves the process)."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:16]


def model_name(generator: str | None) -> str | None:
    """The model's name from an answer's `generator` ("llama:SmolLM2-135M-Instruct.Q4_1.gguf" -> the file name)."""
    return generator.split(":", 1)[-1] if generator else None


def attribute_value(value: Any) -> Any:
    """An OTLP attribute value: scalars and homogeneous lists of scalars as they are, anything else as JSON."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return list(value)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return [float(v) for v in value]
    return json.dumps(value, default=str, separators=(",", ":"))


def ragopt_attrs(values: dict[str, Any], prefix: str = "ragopt.") -> dict[str, Any]:
    return {prefix + key: attribute_value(v) for key, v in values.items() if v is not None}


def span_name(span: Span, model: str | None) -> str:
    """`chat {model}` as the GenAI conventions name a model call, `retrieval {stage}` for a retriever (the stage
    standing for the data source), the operation alone for embeddings, else the stage's own name."""
    operation, _ = kind_of(span)
    if operation == "retrieval":
        return f"retrieval {span.name}"
    if operation == "chat" and model:
        return f"chat {model}"
    if operation == "execute_tool" and span.usage.attrs.get("tool.name"):
        return f"execute_tool {span.usage.attrs['tool.name']}"
    return operation or span.name


def stage_attributes(span: Span, model: str | None) -> dict[str, Any]:
    """Every attribute of one stage's span: its operation and kind, the GenAI figures it measured, and ragopt's.
    `model`: the generator's, for a chat span."""
    operation, kind = kind_of(span)
    usage = span.usage
    out: dict[str, Any] = {"openinference.span.kind": kind, "ragopt.stage": span.name, "ragopt.ms": span.ms,
                           "ragopt.items_in": span.items_in, "ragopt.items_out": span.items_out}
    if operation is not None:
        out["gen_ai.operation.name"] = operation
    if span.skipped:
        out["ragopt.skipped"] = True
    if usage.cache_hits or usage.cache_misses:
        out.update({"ragopt.cache_hits": usage.cache_hits, "ragopt.cache_misses": usage.cache_misses})
    if span.error:
        out["error.type"] = span.error.split(":")[0].strip() or "error"
    if operation == "retrieval":
        out["gen_ai.request.top_k"] = span.items_out  # the passages this stage handed on
    if operation == "chat":
        if model:  # the generator's model (the trace does not say which embedder an embed span used)
            out.update({"gen_ai.request.model": model, "llm.model_name": model})
        out.update(_chat_attributes(span))
    if operation == "execute_tool" and usage.attrs.get("tool.name"):  # GenAI's and OpenInference's name of the tool
        out.update({"gen_ai.tool.name": usage.attrs["tool.name"], "tool.name": usage.attrs["tool.name"]})
    out.update(ragopt_attrs(usage.attrs))
    return out


def _chat_attributes(span: Span) -> dict[str, Any]:
    usage, attrs = span.usage, span.usage.attrs
    out: dict[str, Any] = {
        "gen_ai.usage.input_tokens": usage.tokens_in, "gen_ai.usage.output_tokens": usage.tokens_out,
        "llm.token_count.prompt": usage.tokens_in, "llm.token_count.completion": usage.tokens_out,
        "llm.token_count.total": usage.tokens_in + usage.tokens_out,
    }
    if attrs.get("reused_tokens") is not None:  # prompt tokens whose KV was reused: the "cache read" of a local model
        out["gen_ai.usage.cache_read.input_tokens"] = int(attrs["reused_tokens"])
        out["llm.token_count.prompt_details.cache_read"] = int(attrs["reused_tokens"])
    if attrs.get("ttft_ms") is not None:
        out["gen_ai.response.time_to_first_chunk"] = float(attrs["ttft_ms"]) / 1000.0
    if attrs.get("finish_reason"):
        out["gen_ai.response.finish_reasons"] = [str(attrs["finish_reason"])]
    return out


def evaluation_event(name: str, score: float, explanation: str | None = None) -> dict[str, Any]:
    """The attributes of a `gen_ai.evaluation.result` event: a judged metric's score for one answer."""
    out: dict[str, Any] = {"gen_ai.evaluation.name": name, "gen_ai.evaluation.score.value": float(score)}
    if explanation:
        out["gen_ai.evaluation.explanation"] = explanation
    return out
