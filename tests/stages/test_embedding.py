"""The query-embedding stage: cache counts per query, and tenants kept apart."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ragopt.backends.embeddings import Embedder
from ragopt.cache import Cache
from ragopt.config import EmbedderConfig
from ragopt.stages.embedding import EmbedQuery


def test_embed_query_stage_reports_cache_counts(tmp_path: Path) -> None:
    from ragopt.pipeline import Pipeline
    from ragopt.types import Query

    emb = Embedder(EmbedderConfig(), Cache(tmp_path / "cache"))
    pipe = Pipeline([EmbedQuery(emb)])
    q = Query(text="Why is the sky blue?", tenant="t1")
    first, second = pipe.run(q), pipe.run(q)
    assert first.state.query_vector.shape == (384,)
    assert (first.trace.spans[0].usage.cache_misses, second.trace.spans[0].usage.cache_hits) == (1, 1)
    other = pipe.run(Query(text="Why is the sky blue?", tenant="t2"))
    assert other.trace.spans[0].usage.cache_misses == 1  # another tenant's identical query is not shared
    assert np.allclose(other.state.query_vector, first.state.query_vector, atol=1e-5)
    emb.cache.close()
