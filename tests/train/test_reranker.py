"""Training a cross-encoder for a few steps on the tiny corpus: labelled pairs from mined examples; the saved
folder loads by path, is reused, and serves the rerank stage."""

from __future__ import annotations

from pathlib import Path

from ragopt.pipeline import Pipeline
from ragopt.stages.rerank import CrossEncoderRerank, RerankConfig
from ragopt.train import MiningConfig, RerankerTrainingConfig, train_reranker
from ragopt.train.data import Example
from ragopt.train.reranker import labelled_pairs
from ragopt.types import Query


def test_pairs_label_positives_one_and_negatives_zero() -> None:
    pairs = labelled_pairs([Example("q", "pos", ("n1", "n2"), "q1")])
    assert pairs == [("q", "pos", 1.0), ("q", "n1", 0.0), ("q", "n2", 0.0)]


def test_trained_reranker_loads_by_path_is_reused_and_reranks(tiny_beir: Path, workspace: Path, tiny_index) -> None:  # type: ignore[no-untyped-def]
    from sentence_transformers import CrossEncoder

    config = RerankerTrainingConfig(batch_size=8, max_length=64, mining=MiningConfig(depth=10))
    trained = train_reranker(tiny_beir, "test", workspace, config, progress=False)
    m = trained.manifest
    assert not trained.reused and m["pairs"] >= 12 and m["pairs"] % 2 == 0 and m["steps"] == -(-m["pairs"] // 8)
    assert CrossEncoder(str(trained.path), device="cpu").predict([("q", "p")]).shape == (1,)
    assert train_reranker(tiny_beir, "test", workspace, config, progress=False).reused

    index, embedder = tiny_index
    from ragopt.config import RetrievalConfig
    from ragopt.plan import retrieval_stages

    stages = [*retrieval_stages(index, embedder, RetrievalConfig(retriever="dense", top_k=8)),
              CrossEncoderRerank(RerankConfig(model=str(trained.path), depth=5, max_length=64))]
    result = Pipeline(stages).run(Query(text="What makes bread dough rise?"))
    span = result.trace.span("rerank")
    assert span is not None and span.usage.attrs["scored"] == 5
    assert sorted(span.usage.attrs["order_after"]) == sorted(span.usage.attrs["order_before"])
