"""Cached MiniLM embeddings: a re-run embeds nothing, a warm Embedder never loads the model, and the key
holds the model fingerprint (weights/config bytes), the normalize flag, the exact text and its owner."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ragopt.cache import Cache
from ragopt.config import DEFAULT_EMBEDDER, EmbedderConfig
from ragopt.stages import embedding
from ragopt.stages.embedding import Embedder, model_fingerprint, resolve_model_path

TEXTS = [
    "Plants turn sunlight into glucose.",
    "A volcano erupts when magma rises.",
    "Honey bees make honey in the hive.",
    "Plants turn sunlight into glucose.",  # a duplicate in the same call
]


def test_second_encode_embeds_nothing_and_a_fresh_embedder_never_loads_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = Embedder(EmbedderConfig(), Cache(tmp_path / "cache"))
    cold = first.encode(TEXTS)
    assert cold.vectors.shape == (4, 384) and cold.vectors.dtype == np.float32
    assert (cold.hits, cold.misses) == (0, 4)
    assert np.allclose(np.linalg.norm(cold.vectors, axis=1), 1.0, atol=1e-5)  # normalized by default
    assert np.allclose(cold.vectors[0], cold.vectors[3])

    warm = first.encode(TEXTS)
    assert (warm.hits, warm.misses) == (4, 0)
    assert np.array_equal(warm.vectors, cold.vectors)
    first.cache.close()

    # A new process would start with no model in memory: forbid loading it, as a fault on purpose.
    def no_model(path: str) -> None:
        raise AssertionError(f"the model was loaded: {path}")

    monkeypatch.setattr(embedding, "_load", no_model)
    fresh = Embedder(EmbedderConfig(), Cache(tmp_path / "cache"))
    again = fresh.encode(list(reversed(TEXTS)))
    assert (again.hits, again.misses) == (4, 0)
    assert np.array_equal(again.vectors, cold.vectors[::-1])
    assert "model" not in fresh.__dict__  # the cached_property was never touched
    with pytest.raises(AssertionError, match="model was loaded"):
        fresh.encode(["a text nobody embedded"])
    fresh.cache.close()


def test_vectors_match_sentence_transformers_directly(tmp_path: Path) -> None:
    emb = Embedder(EmbedderConfig(), Cache(None))
    direct = emb.model.encode(TEXTS[:2], normalize_embeddings=True, convert_to_numpy=True)
    assert np.allclose(emb.encode(TEXTS[:2]).vectors, direct, atol=1e-5)


def test_key_includes_the_normalize_flag(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    normalized = Embedder(EmbedderConfig(normalize=True), cache)
    raw = Embedder(EmbedderConfig(normalize=False), cache)
    assert normalized.encode(TEXTS[:2]).misses == 2
    out = raw.encode(TEXTS[:2])
    assert out.misses == 2  # the cached normalized vectors are not served for unnormalized requests
    assert raw.encode(TEXTS[:2]).misses == 0
    assert normalized._key("x", (None, ())).digest() != raw._key("x", (None, ())).digest()
    cache.close()


def test_key_includes_tenant_and_scopes_of_the_text() -> None:
    emb = Embedder(EmbedderConfig(), Cache(None))
    keys = {
        emb._key("same text", owner).digest()
        for owner in [(None, ()), ("a", ()), ("b", ()), ("a", ("hr",)), ("a", ("hr", "ops"))]
    }
    assert len(keys) == 5


def link_copy(src: Path, dst: Path) -> Path:
    """A copy of a model folder made of symlinks to the original files (the weights are 90 MB)."""
    for file in src.rglob("*"):
        target = dst / file.relative_to(src)
        if file.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(file, target)
    return dst


def test_model_fingerprint_hashes_the_files_not_the_name(tmp_path: Path) -> None:
    """A copy of the model folder (links to the big weight files) has the default's fingerprint; one changed
    config byte gives another fingerprint, so the cache can never serve vectors of a different model."""
    original = Path(resolve_model_path(DEFAULT_EMBEDDER))
    copy = link_copy(original, tmp_path / "minilm-copy")
    default_fp = model_fingerprint(DEFAULT_EMBEDDER)
    assert len(default_fp) == 16
    assert model_fingerprint(str(copy)) == default_fp  # the same bytes under another name

    edited = link_copy(original, tmp_path / "minilm-edited")
    cfg_file = edited / "config_sentence_transformers.json"
    data = cfg_file.read_text()
    cfg_file.unlink()
    cfg_file.write_text(data + "\n")  # one byte more, everything else the same
    edited_fp = model_fingerprint(str(edited))
    assert edited_fp != default_fp

    (copy / "README.md").unlink()
    (copy / "README.md").write_text("docs only")
    embedding._fingerprints.pop(str(copy.resolve()), None)
    assert model_fingerprint(str(copy)) == default_fp  # a README does not change the model

    cache = Cache(None)
    key_default = Embedder(EmbedderConfig(), cache)._key("t", (None, ()))
    key_edited = Embedder(EmbedderConfig(model=str(edited)), cache)._key("t", (None, ()))
    assert key_default.model == default_fp and key_edited.model == edited_fp
    assert key_default.digest() != key_edited.digest()


def test_embed_query_stage_reports_cache_counts(tmp_path: Path) -> None:
    from ragopt.pipeline import Pipeline
    from ragopt.types import Query

    emb = Embedder(EmbedderConfig(), Cache(tmp_path / "cache"))
    pipe = Pipeline([embedding.EmbedQuery(emb)])
    q = Query(text="Why is the sky blue?", tenant="t1")
    first, second = pipe.run(q), pipe.run(q)
    assert first.state.query_vector.shape == (384,)
    assert (first.trace.spans[0].usage.cache_misses, second.trace.spans[0].usage.cache_hits) == (1, 1)
    other = pipe.run(Query(text="Why is the sky blue?", tenant="t2"))
    assert other.trace.spans[0].usage.cache_misses == 1  # another tenant's identical query is not shared
    assert np.allclose(other.state.query_vector, first.state.query_vector, atol=1e-5)
    emb.cache.close()
