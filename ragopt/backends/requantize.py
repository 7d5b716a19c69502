"""Copies of a GGUF with its weights in another llama.cpp quantization, made with llama.cpp's own quantizer.

Why: on x86 CPUs llama.cpp multiplies Q8_0, Q4_0 and IQ4_NL weights with kernels that take several tokens at once,
while Q4_1 (the packaged SmolLM2's type) is multiplied one token at a time. Prompt lookup's verification batches
pay only with the former (measured in the README's decoding section). Q8_0 holds Q4_1's values almost exactly, so a
Q8_0 copy keeps the model's answers; a 4-bit copy of 4-bit weights loses precision a second time.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Literal

from ragopt.errors import InputError

Quantization = Literal["q4_0", "iq4_nl", "q8_0"]
LLAMA_FTYPES = {"q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0", "iq4_nl": "LLAMA_FTYPE_MOSTLY_IQ4_NL", "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0"}


def requantize(source: Path, out: Path, kind: Quantization, threads: int = 2) -> None:
    """Write `out` with `source`'s weights as `kind`, atomically: a partial file (this process's own, so two
    processes making the same copy never write into one file) never takes its name."""
    import llama_cpp

    llama_log = logging.getLogger("llama-cpp-python")  # llama.cpp's log callback prints what this logger allows
    level = llama_log.level
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, LLAMA_FTYPES[kind])
    params.allow_requantize = True
    params.nthread = threads
    partial = out.with_name(f"{out.name}.{os.getpid()}.partial")
    llama_log.setLevel(logging.ERROR)  # not a line per tensor
    try:
        failed = llama_cpp.llama_model_quantize(str(source).encode(), str(partial).encode(), params) != 0
    finally:
        llama_log.setLevel(level)
    if failed:
        partial.unlink(missing_ok=True)
        raise InputError(f"llama.cpp could not quantize the model to {kind}", path=source)
    os.replace(partial, out)


def model_cache_dir() -> Path:
    """Where derived model files live: $RAGOPT_MODEL_CACHE, else ~/.cache/ragopt/models (outside any project)."""
    return Path(os.environ.get("RAGOPT_MODEL_CACHE") or Path.home() / ".cache" / "ragopt" / "models")


def cached_copy(source: Path, kind: Quantization) -> Path:
    """`source` as `kind`, made on first use and named by the source's hash, so an edited source gets a new copy."""
    from ragopt.gguf_meta import model_fingerprint

    folder = model_cache_dir()
    out = folder / f"{source.stem}.{model_fingerprint(source)}.{kind}.gguf"
    if not out.is_file():
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create the model cache: {exc.strerror} (set RAGOPT_MODEL_CACHE)", path=folder) from None
        requantize(source, out, kind)
    return out


def engine_model(model: str | Path | None, weights: Literal["file"] | Quantization = "file") -> Path:
    """The GGUF an engine loads: `model` (or the packaged default) as it is, or its cached copy as `weights`."""
    from ragopt.gguf_meta import resolve_model

    path = resolve_model(model)
    return path if weights == "file" else cached_copy(path, weights)
