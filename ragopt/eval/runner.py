"""Runs one retrieval configuration over an evaluation set: rankings, traces and document-level runs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable
from pathlib import Path

from ragopt.config import RetrievalConfig
from ragopt.data import EvalSet
from ragopt.index import Index
from ragopt.pipeline import Pipeline
from ragopt.retrieval import retrieval_stages
from ragopt.stages.embedding import Embedder
from ragopt.trace import Trace
from ragopt.types import Hit


@dataclass
class QueryRun:
    query_id: str
    hits: list[Hit]  # chunk ranking, best first
    trace: Trace

    def doc_scores(self, limit: int | None = None) -> list[tuple[str, float]]:
        return best_per_doc(((h.chunk.doc_id, h.score) for h in self.hits), limit)


def best_per_doc(chunk_scores: Iterable[tuple[str, float]], limit: int | None = None) -> list[tuple[str, float]]:
    """(doc id, score) of each document once, scored by its best chunk; the input is sorted best first, so
    a document's first chunk is its best."""
    best: dict[str, float] = {}
    for doc_id, score in chunk_scores:
        best.setdefault(doc_id, score)
    return list(best.items())[:limit]


def chunk_depth(index: Index, docs_wanted: int) -> int:
    """How many chunks to retrieve so that about `docs_wanted` distinct documents come back."""
    per_doc = math.ceil(index.manifest.n_chunks / max(index.manifest.n_documents, 1))
    return min(index.manifest.n_chunks, docs_wanted * (1 if per_doc == 1 else 2 * per_doc))


def run_queries(
    evalset: EvalSet, index: Index, embedder: Embedder, config: RetrievalConfig, k: int, *, progress: bool = True
) -> list[QueryRun]:
    """Every query through the retrieval pipeline at depth `k` chunks; one trace per query. Queries are
    encoded afresh, so the latency does not depend on what an earlier run cached."""
    stages = retrieval_stages(index, embedder, config, k=k, cache_queries=False)
    if config.retriever != "bm25":
        embedder.model  # load before timing, so the first query does not carry the model load
    pipeline = Pipeline(stages)
    results = pipeline.run_many([q.query for q in evalset.queries], progress=progress)
    return [QueryRun(q.query.id, r.hits, r.trace) for q, r in zip(evalset.queries, results)]


def write_trec(path: str | Path, tag: str, rankings: Iterable[tuple[str, Iterable[tuple[str, float]]]]) -> None:
    """TREC run format, `qid Q0 docid rank score tag`, from (query id, [(doc id, score), ...] best first)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for qid, docs in rankings:
            for rank, (doc_id, score) in enumerate(docs, start=1):
                f.write(f"{qid} Q0 {doc_id} {rank} {score:.6f} {tag}\n")
