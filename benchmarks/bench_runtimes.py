#!/usr/bin/env python3
"""The embedder's runtimes side by side: texts/s and tokens/s of float32 torch and int8 ONNX Runtime on the same texts.

    python benchmarks/bench_runtimes.py [--docs 500] [--threads 1] [--batch-size 64] [--runtimes torch,onnx-int8] [--json]

Each runtime embeds the same SciFact texts (title + text of the first --docs documents, as `ragopt index` embeds
whole documents) through ragopt's Embedder without its cache, with the same batch size and threads, the model
loaded (and the int8 model derived) before the clock starts; the runtimes alternate over --rounds rounds and each
keeps its best round, so a burst of load on a shared machine hurts both alike. Tokens are the packaged MiniLM's word
pieces as the encoder reads them (truncated at 256, [CLS] and [SEP] counted). Prints wall-clock and CPU-time
throughput, each runtime's ratio to torch's, and the cosine of each runtime's vectors to torch's (min and mean).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ragopt.config import EMBEDDER_RUNTIMES, EmbedderConfig
from ragopt.data.beir import load_beir
from ragopt.index import make_embedder
from ragopt.resources import Resources
from ragopt.types import Chunk

DEFAULT_DATASET = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="a BEIR folder (default: ../shared/data/scifact)")
    ap.add_argument("--docs", type=int, default=500, help="how many documents (default 500)")
    ap.add_argument("--threads", type=int, default=1, help="threads of each runtime (default 1)")
    ap.add_argument("--batch-size", type=int, default=EmbedderConfig().batch_size)
    ap.add_argument("--runtimes", default=",".join(EMBEDDER_RUNTIMES), help="comma-separated; torch is the baseline")
    ap.add_argument("--rounds", type=int, default=2, help="rounds, runtimes alternating; each keeps its best (default 2)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    args.runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    if "torch" not in args.runtimes or set(args.runtimes) - set(EMBEDDER_RUNTIMES):
        ap.error(f"--runtimes: a subset of {','.join(EMBEDDER_RUNTIMES)} with torch (the baseline)")
    if args.docs < 1 or args.threads < 1 or args.batch_size < 1 or args.rounds < 1:
        ap.error("--docs, --threads, --batch-size and --rounds must be >= 1")
    if not (args.dataset / "corpus.jsonl").exists():
        ap.error(f"--dataset: {args.dataset} has no corpus.jsonl")
    return args


def main() -> int:
    args = parse_args()
    import torch

    torch.set_num_threads(args.threads)
    docs = load_beir(args.dataset).documents[: args.docs]
    texts = [Chunk(id=d.id, doc_id=d.id, start=0, end=len(d.text), text=d.text, title=d.title).indexed_text for d in docs]
    resources = Resources()
    with tempfile.TemporaryDirectory(prefix="bench-runtimes-") as tmp:
        embedders = {r: make_embedder(Path(tmp), EmbedderConfig(runtime=r, threads=args.threads, batch_size=args.batch_size), resources)
                     for r in args.runtimes}
        for embedder in embedders.values():  # load (derive) and warm up before any clock
            embedder.encode(texts[:8], use_cache=False)
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(Path(embedders["torch"].path) / "tokenizer.json"))
        tokenizer.enable_truncation(embedders["torch"].max_seq_length)
        tokens = sum(len(e.ids) for e in tokenizer.encode_batch(texts))
        best: dict[str, tuple[float, float]] = {}
        vectors: dict[str, np.ndarray] = {}
        for round_ in range(args.rounds):
            for runtime, embedder in embedders.items():
                t0, c0 = time.perf_counter(), time.process_time()
                vectors[runtime] = embedder.encode(texts, use_cache=False).vectors
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                best[runtime] = min(best.get(runtime, (wall, cpu)), (wall, cpu))
                print(f"[bench_runtimes] round {round_ + 1} {runtime}: {wall:.1f} s wall, {cpu:.1f} s CPU "
                      f"(load average {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
    resources.close()
    out = report(args, len(texts), tokens, best, vectors)
    print(json.dumps(out) if args.json else table(out))
    return 0


def report(args: argparse.Namespace, n: int, tokens: int, best: dict[str, tuple[float, float]],
           vectors: dict[str, np.ndarray]) -> dict[str, Any]:
    runtimes = {}
    for runtime, (wall, cpu) in best.items():
        cosine = np.sum(vectors[runtime] * vectors["torch"], axis=1)
        runtimes[runtime] = {
            "wall_s": wall, "cpu_s": cpu, "texts_per_s": n / wall, "tokens_per_s": tokens / wall,
            "texts_per_cpu_s": n / cpu, "speedup_over_torch": best["torch"][0] / wall,
            "speedup_over_torch_cpu_time": best["torch"][1] / cpu,
            "cosine_to_torch_min": float(cosine.min()), "cosine_to_torch_mean": float(cosine.mean()),
        }  # fmt: skip
    return {"n_texts": n, "n_tokens": tokens, "threads": args.threads, "batch_size": args.batch_size, "rounds": args.rounds,
            "load_average_1m_at_end": os.getloadavg()[0], "cpus": os.cpu_count(), "runtimes": runtimes}


def table(out: dict[str, Any]) -> str:
    lines = [f"SciFact, {out['n_texts']} texts ({out['n_tokens']} tokens), {out['threads']} thread(s), batch "
             f"{out['batch_size']}, best of {out['rounds']} rounds",
             f"  {'runtime':10s} {'texts/s':>8s} {'tokens/s':>9s} {'x torch':>8s} {'x torch (CPU)':>14s} {'cos min':>8s} {'cos mean':>9s}"]
    for runtime, r in out["runtimes"].items():
        lines.append(f"  {runtime:10s} {r['texts_per_s']:8.1f} {r['tokens_per_s']:9.0f} {r['speedup_over_torch']:8.2f} "
                     f"{r['speedup_over_torch_cpu_time']:14.2f} {r['cosine_to_torch_min']:8.4f} {r['cosine_to_torch_mean']:9.5f}")
    lines.append(f"load average (1 min) at the end: {out['load_average_1m_at_end']:.1f} on {out['cpus']} CPUs")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
