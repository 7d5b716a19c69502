"""Cached MiniLM embeddings: a re-run embeds nothing, a warm Embedder never loads the model, vectors come
back in the caller's order whatever the length sorting did, they carry known semantic relations, and the key
holds the model fingerprint (weights/config bytes, remembered by file size and mtime), the normalize flag,
the exact text and its owner."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragopt.cache import Cache
from ragopt.config import DEFAULT_EMBEDDER, EmbedderConfig
from ragopt.resources import Resources
from ragopt.backends.embeddings import Embedder, model_fingerprint, resolve_model_path

TEXTS = [
    "Plants turn sunlight into glucose.",
    "A volcano erupts when magma rises.",
    "Honey bees make honey in the hive.",
    "Plants turn sunlight into glucose.",  # a duplicate in the same call
]


class NoModels(Resources):
    """A fault on purpose: any attempt to load a model fails loudly."""

    def sentence_transformer(self, path: str, device: str = "cpu") -> Any:
        raise AssertionError(f"the model was loaded: {path}")

    def get(self, key: Any, factory: Any) -> Any:  # the int8 runtime's model (the default on a CPU) loads through here
        raise AssertionError(f"the model was loaded: {key}")


def test_second_encode_embeds_nothing_and_a_fresh_embedder_never_loads_the_model(tmp_path: Path) -> None:
    first = Embedder(EmbedderConfig(), Cache(tmp_path / "cache"))
    cold = first.encode(TEXTS)
    assert cold.vectors.shape == (4, 384) and cold.vectors.dtype == np.float32
    assert (cold.cache_hits, cold.cache_misses) == (0, 4)
    assert np.allclose(np.linalg.norm(cold.vectors, axis=1), 1.0, atol=1e-5)  # normalized by default
    assert np.allclose(cold.vectors[0], cold.vectors[3])

    warm = first.encode(TEXTS)
    assert (warm.cache_hits, warm.cache_misses) == (4, 0)
    assert np.array_equal(warm.vectors, cold.vectors)
    first.cache.close()

    fresh = Embedder(EmbedderConfig(), Cache(tmp_path / "cache"), NoModels())  # as a new process would start
    again = fresh.encode(list(reversed(TEXTS)))
    assert (again.cache_hits, again.cache_misses) == (4, 0)
    assert np.array_equal(again.vectors, cold.vectors[::-1])
    assert "model" not in fresh.__dict__  # the cached_property was never touched
    with pytest.raises(AssertionError, match="model was loaded"):
        fresh.encode(["a text nobody embedded"])
    fresh.cache.close()


def test_vectors_carry_known_semantic_relations() -> None:
    """Independent of any implementation detail: a paraphrase is nearer than an unrelated sentence, and a
    sentence is nearest to itself."""
    vectors = Embedder(EmbedderConfig(), Cache(None)).encode(
        ["A man is playing a guitar.", "Someone plays an acoustic guitar.", "The central bank raised interest rates."]
    ).vectors
    cos = vectors @ vectors.T
    assert cos[0, 1] > 0.5 > cos[0, 2] + 0.3
    assert np.allclose(np.diag(cos), 1.0, atol=1e-5) and (cos <= 1.0 + 1e-5).all()


def test_length_sorted_batches_come_back_in_the_callers_order() -> None:
    """Texts of very different lengths are encoded longest first in several blocks; each vector must still
    land in its own row: the same as that text encoded alone."""
    texts = [" ".join(["word"] * n) + f" number {n}" for n in (3, 40, 1, 25, 7, 60, 2)]
    embedder = Embedder(EmbedderConfig(batch_size=2), Cache(None))
    embedder.save_every = 2  # blocks of one batch: several cache writes
    together = embedder.encode(texts, use_cache=False).vectors
    alone = np.vstack([embedder.encode([t], use_cache=False).vectors for t in texts])
    assert np.allclose(together, alone, atol=1e-5)
    assert not np.allclose(together[0], together[1], atol=1e-2)  # the texts do differ


def test_key_includes_the_normalize_flag(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    resources = Resources()
    normalized = Embedder(EmbedderConfig(normalize=True), cache, resources)
    raw = Embedder(EmbedderConfig(normalize=False), cache, resources)
    assert normalized.encode(TEXTS[:2]).cache_misses == 2
    out = raw.encode(TEXTS[:2])
    assert out.cache_misses == 2  # the cached normalized vectors are not served for unnormalized requests
    assert raw.encode(TEXTS[:2]).cache_misses == 0
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
    assert model_fingerprint(str(copy)) == default_fp  # a README does not change the model

    cache = Cache(None)
    key_default = Embedder(EmbedderConfig(runtime="torch"), cache)._key("t", (None, ()))  # int8's is its recipe's too
    key_edited = Embedder(EmbedderConfig(model=str(edited)), cache)._key("t", (None, ()))
    assert key_default.model == default_fp and key_edited.model == edited_fp
    assert key_default.digest() != key_edited.digest()


def test_a_remembered_fingerprint_is_recomputed_when_a_file_changes(tmp_path: Path) -> None:
    """The fingerprint is remembered by each file's size and mtime: a re-run does not hash 90 MB again, and a
    model edited in place is never taken for the old one."""
    model = link_copy(Path(resolve_model_path(DEFAULT_EMBEDDER)), tmp_path / "minilm")
    cfg_file = model / "config.json"
    data = cfg_file.read_text()
    cfg_file.unlink()
    cfg_file.write_text(data)
    cache = Cache(tmp_path / "cache")
    first = model_fingerprint(str(model), cache)
    stat = cfg_file.stat()
    swapped = data.replace('"', "'", 1)  # same size, other bytes
    cfg_file.write_text(swapped)
    os.utime(cfg_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert model_fingerprint(str(model), cache) == first  # size and mtime unchanged: remembered, not re-read
    assert model_fingerprint(str(model)) != first  # (the bytes did change)
    os.utime(cfg_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert model_fingerprint(str(model), cache) == model_fingerprint(str(model)) != first
    cache.close()


def test_device_and_threads_are_the_configured_ones_only_for_the_encode(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from ragopt.cli._common import add_chunking_args, embedder_config

    parser = argparse.ArgumentParser()
    add_chunking_args(parser)
    assert embedder_config(parser.parse_args(["--device", "cpu"])).device == "cpu"
    assert embedder_config(parser.parse_args([])).device == "auto"

    cpu = Embedder(EmbedderConfig(device="cpu", threads=2, runtime="torch"), Cache(None))
    before = torch.get_num_threads()
    seen: list[int] = []
    monkeypatch.setattr(cpu.model, "encode", lambda *a, **kw: seen.append(torch.get_num_threads()) or np.zeros((1, 384)))
    cpu.encode(["x"])
    assert cpu.device == "cpu" and str(cpu.model.device) == "cpu"
    assert seen == [2] and torch.get_num_threads() == before  # the caller's thread count comes back
    auto = Embedder(EmbedderConfig(device="auto"), Cache(None))
    assert auto.device == ("cuda" if torch.cuda.is_available() else "cpu")


def test_an_english_only_embedder_on_a_mostly_cjk_corpus_gets_one_warning_line() -> None:
    from ragopt.backends.embeddings import language_warning
    from ragopt.config import DEFAULT_EMBEDDER

    chinese = ["《战国无双3》是由光荣和ω-force开发的动作游戏。", "上海是中国的经济中心。"]
    warning = language_warning([DEFAULT_EMBEDDER, DEFAULT_EMBEDDER], chinese)
    assert warning is not None and "\n" not in warning and "`embedders`" in warning and "English only" in warning
    assert language_warning([DEFAULT_EMBEDDER], ["Plain English abstracts.", "战国"]) is None  # mostly English
    assert language_warning(["/models/multilingual-e5"], chinese) is None  # another model: nothing to say


def test_auto_retriever_is_bm25_only_for_a_mostly_cjk_corpus_and_a_named_english_only_embedder() -> None:
    from ragopt.backends.embeddings import auto_retrieval
    from ragopt.config import DEFAULT_EMBEDDER, RetrievalConfig

    chinese = ["《战国无双3》是由光荣和ω-force开发的动作游戏。", "上海是中国的经济中心。"]
    given = RetrievalConfig(top_k=7)
    minilm = EmbedderConfig(model=DEFAULT_EMBEDDER)
    retrieval, embedder, note = auto_retrieval(given, minilm, chinese, embedder_given=True)
    assert retrieval.retriever == "bm25" and retrieval.top_k == 7 and embedder == minilm
    assert note is not None and "\n" not in note and "--retriever hybrid" in note
    for model, texts in ((DEFAULT_EMBEDDER, ["Plain English abstracts.", "战国"]), ("/models/multilingual-e5", chinese)):
        # mostly English; a model that may read Chinese
        retrieval, embedder, note = auto_retrieval(given, EmbedderConfig(model=model), texts, embedder_given=True)
        assert (retrieval.retriever, embedder.model, note) == ("hybrid", model, None)


def test_a_named_retriever_without_an_embedder_takes_the_multilingual_one_on_a_mostly_cjk_corpus() -> None:
    from ragopt.backends.embeddings import embedder_for
    from ragopt.config import DEFAULT_EMBEDDER, MULTILINGUAL_E5

    chinese = ["《战国无双3》是由光荣和ω-force开发的动作游戏。", "上海是中国的经济中心。"]
    minilm = EmbedderConfig(model=DEFAULT_EMBEDDER)
    for retriever in ("dense", "hybrid"):
        embedder, note = embedder_for(retriever, minilm, chinese, embedder_given=False)
        assert embedder.model == MULTILINGUAL_E5 and note is not None and "\n" not in note
        assert note.startswith(f"note: --retriever {retriever} embeds with {MULTILINGUAL_E5}")
    assert embedder_for("hybrid", minilm, chinese, embedder_given=True) == (minilm, None)  # --embedder stands
    assert embedder_for("bm25", minilm, chinese, embedder_given=False) == (minilm, None)  # nothing to embed
    assert embedder_for("hybrid", minilm, ["Plain English abstracts.", "战国"], embedder_given=False) == (minilm, None)


@pytest.mark.skipif(sys.platform != "linux" or any(Path(p).exists() for p in ("/proc/driver/nvidia/version", "/dev/kfd")),
                    reason="a GPU driver is here: auto asks torch")
def test_auto_device_without_a_gpu_driver_is_the_cpu_without_importing_torch() -> None:
    code = ("import sys; from ragopt.backends.embeddings import resolve_device; "
            "print(resolve_device('auto'), 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["cpu", "False"], done.stdout
