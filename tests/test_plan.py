"""The stage plan: every optional stage in its slot, each one switchable off, knobs read from declarations."""

from __future__ import annotations

from typing import Any

import pytest

from ragopt.config import RetrievalConfig, knobs
from ragopt.errors import InputError
from ragopt.plan import PlanConfig, stage_specs, validate_stage_values
from ragopt.plan import pipeline_for
from ragopt.types import Query, Turn

HISTORY = [Turn(role="user", content="Which job loads the tide tables?"), Turn(role="assistant", content="tides_ingest [1].")]
# Each kind in a setting that runs without a model file, and the setting that switches it off (None: leave it out).
ON = {"rewrite": {"mode": "rules"}, "compress": {"budget": 0.5}, "history": {"keep_turns": 1}, "prompt": {},
      "generate": {"generator": "extractive"}, "cite": {"enabled": True}}
OFF = {"rewrite": {"mode": "off"}, "compress": None, "history": None, "prompt": None, "generate": {"generator": "none"},
       "cite": {"enabled": False}}


def run(tiny_index: Any, stages: dict[str, Any], retriever: str = "hybrid") -> Any:
    index, embedder = tiny_index
    plan = PlanConfig(chunker=index.manifest.chunker, embedder=embedder.config,
                      retrieval=RetrievalConfig(retriever=retriever, top_k=3), stages=stages)
    pipeline = pipeline_for(plan, index, embedder, index.path.parent.parent)
    return pipeline.run(Query(text="And what causes ocean tides?", history=HISTORY))


def test_every_builtin_kind_is_covered_here() -> None:
    assert set(stage_specs()) >= set(ON) and set(ON) == set(OFF)


def test_the_whole_chain_runs_in_slot_order(tiny_index: Any) -> None:
    result = run(tiny_index, dict(ON))
    assert [s.name for s in result.trace.spans] == [
        "rewrite", "embed", "vector", "bm25", "fuse", "compress", "history", "prompt", "extractive", "attribute"]
    assert result.answer is not None and result.hits and result.state.prompt is not None


@pytest.mark.parametrize("kind", sorted(ON))
def test_each_stage_can_be_switched_off_and_the_pipeline_still_runs(tiny_index: Any, kind: str) -> None:
    stages = {k: v for k, v in ON.items() if k != kind}
    if OFF[kind] is not None:
        stages[kind] = OFF[kind]
    result = run(tiny_index, stages)
    names = [s.name for s in result.trace.spans]
    gone = {"rewrite": "rewrite", "compress": "compress", "history": "history", "prompt": "prompt",
            "generate": "extractive", "cite": "attribute"}[kind]
    assert gone not in names and result.hits
    assert (result.answer is None) == (kind == "generate")
    if kind == "generate":
        assert "attribute" not in names  # nothing to attribute without an answer


def test_retrieval_alone_and_each_retriever_run(tiny_index: Any) -> None:
    for retriever in ("dense", "bm25", "hybrid"):
        result = run(tiny_index, {}, retriever)
        assert result.hits and result.hits[0].chunk.doc_id == "d6"


def test_multi_query_rewrite_stands_in_for_the_retrieval_stages(tiny_index: Any) -> None:
    result = run(tiny_index, {"rewrite": {"mode": "multi"}})
    assert [s.name for s in result.trace.spans] == ["multi_retrieve"] and result.hits


def test_knobs_come_from_the_declarations_and_bad_values_are_input_errors() -> None:
    assert "mode" in knobs(stage_specs()["rewrite"].config)
    assert PlanConfig(stages={"generate": {"generator": "extractive"}}).params()["generate.generator"] == "extractive"
    with pytest.raises(InputError, match="unknown stage kind 'nope'"):
        validate_stage_values("nope", {}, "x.toml")
    with pytest.raises(InputError, match="no setting 'depth'"):
        validate_stage_values("rewrite", {"depth": [1]}, "x.toml")
    with pytest.raises(InputError):
        validate_stage_values("rewrite", {"mode": ["rules", "sideways"]}, "x.toml")


def test_a_reranker_sees_its_depth_and_the_plan_hands_on_top_k(tiny_index: Any) -> None:
    result = run(tiny_index, {"rerank_maxsim": {"depth": 8}})
    spans = {s.name: s for s in result.trace.spans}
    assert [s.name for s in result.trace.spans] == ["embed", "vector", "bm25", "fuse", "rerank_maxsim", "keep_top"]
    assert spans["fuse"].items_out == 8 and spans["rerank_maxsim"].items_out == 8 and len(result.hits) == 3
