"""The generate kind's routing knob: with `route_small_max_words` > 0 an LLM plan answers a short question that asks
for no reasoning with the extractive answer and the rest with the LLM (the tiny GGUF), the trace says which, and an
LLM question still falls back to the extractive answer when the LLM fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fixtures.tiny_gguf import KV_BYTES_PER_TOKEN_F16
from ragopt.config import RetrievalConfig
from ragopt.errors import InputError
from ragopt.plan import PlanConfig, pipeline_for

SHORT = "What causes ocean tides?"  # 4 words, asks for no reasoning
WHY = "Why do tides rise?"  # as short, but asks for reasoning
LONG = "What is the name of the opening in chess where black answers with the Sicilian Defence?"


def routed(tiny_index: Any, tiny_gguf: Path, **generate: Any) -> Any:
    index, embedder = tiny_index
    plan = PlanConfig(chunker=index.manifest.chunker, embedder=embedder.config,
                      retrieval=RetrievalConfig(retriever="bm25", top_k=3),
                      stages={"generate": {"generator": "llama", "model": str(tiny_gguf), "max_tokens": 8, **generate}})
    return pipeline_for(plan, index, embedder, index.path.parent.parent)


def test_a_short_question_is_answered_extractively_and_a_long_or_why_question_by_the_llm(tiny_index: Any,
                                                                                          tiny_gguf: Path) -> None:
    pipeline = routed(tiny_index, tiny_gguf, route_small_max_words=6)
    short = pipeline.run(SHORT)
    assert short.trace.route == "small" and short.answer.generator == "extractive" and not short.trace.degraded
    assert [s.name for s in short.trace.spans][-3:] == ["prompt", "route", "extractive"]  # the LLM never ran
    for question in (WHY, LONG):
        result = pipeline.run(question)
        assert result.trace.route == "default" and result.answer.generator.startswith("llama"), question
        assert [s.name for s in result.trace.spans][-3:] == ["prompt", "route", "generate"]
        assert result.trace.span("generate").answered and result.trace.tokens_out > 0


def test_route_0_routes_nothing_and_the_trace_says_no_route(tiny_index: Any, tiny_gguf: Path) -> None:
    result = routed(tiny_index, tiny_gguf).run(SHORT)
    assert result.trace.route is None and result.answer.generator.startswith("llama")
    assert "route" not in [s.name for s in result.trace.spans]


def test_a_question_routed_to_the_llm_still_falls_back_when_it_fails(tiny_index: Any, tiny_gguf: Path) -> None:
    pipeline = routed(tiny_index, tiny_gguf, route_small_max_words=6, kv_budget_bytes=64 * KV_BYTES_PER_TOKEN_F16)
    result = pipeline.run(LONG)  # the prompt alone is over the KV budget: admission refuses it
    assert result.trace.route == "default" and result.answer.generator == "extractive"
    assert result.trace.degraded[0].startswith("generate: AdmissionError:")
    assert [s.name for s in result.trace.spans][-2:] == ["generate", "generate.fallback"]


def test_a_negative_word_limit_names_the_setting() -> None:
    with pytest.raises(InputError) as refused:
        PlanConfig(stages={"generate": {"generator": "llama", "route_small_max_words": -1}}).stage_config("generate")
    assert refused.value.field == "route_small_max_words" and "stages.generate" in str(refused.value.path)
