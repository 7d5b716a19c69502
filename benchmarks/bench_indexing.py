#!/usr/bin/env python3
"""Indexing throughput against the raw encoder: `ragopt index`'s build vs sentence-transformers alone.

    python benchmarks/bench_indexing.py [--docs 1000] [--threads 1] [--batch-size 64] [--device auto] [--json]

Both encode the same SciFact texts (title + text of the first --docs documents, one chunk each, as
`ragopt index` builds by default) with the same model object, batch size, device and torch threads, one run
each, the model loaded before either clock starts. "raw" is one `SentenceTransformer.encode` call over all
texts; "ragopt" is `build_index` into a fresh workspace: chunking, cache lookups, length-sorted encoding in
blocks, cache writes, the vector store and the manifest. `ratio` = ragopt texts/s over raw texts/s (1.0: no
overhead at all), wall-clock; `ratio_cpu_time` is the same in process CPU time, which other processes on a
busy machine do not distort. The cache's own cost is measured apart: building the keys, one `get_many` over all texts
and one `set_many` of all vectors (one transaction), in microseconds per text.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np

from ragopt.backends.embeddings import Embedder
from ragopt.cache import Cache
from ragopt.config import ChunkerConfig, EmbedderConfig
from ragopt.data.beir import load_beir
from ragopt.index import build_index, make_embedder
from ragopt.resources import Resources
from ragopt.types import Chunk

DEFAULT_DATASET = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact"
T = TypeVar("T")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="a BEIR folder (default: ../shared/data/scifact)")
    ap.add_argument("--docs", type=int, default=1000, help="how many documents (default 1000; 0 = all 5183)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for both (default 1)")
    ap.add_argument("--batch-size", type=int, default=EmbedderConfig().batch_size)
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    return ap.parse_args()


def timed(work: Callable[[], T]) -> tuple[T, float, float]:
    """work()'s result, its wall-clock seconds and this process's CPU seconds."""
    t0, c0 = time.perf_counter(), time.process_time()
    result = work()
    return result, time.perf_counter() - t0, time.process_time() - c0


def cache_cost(embedder: Embedder, texts: list[str], raw: np.ndarray, folder: Path) -> tuple[float, float, float]:
    """Seconds to build the cache keys of all texts, to look them all up (one get_many) and to store all vectors
    (one set_many), in a fresh cache at `folder`."""
    cache = Cache(folder)
    owners = [(None, ())] * len(texts)
    t0 = time.perf_counter()
    keys = [embedder._key(t, o) for t, o in zip(texts, owners)]
    keys_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    cache.get_many(keys)
    get_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    cache.set_many((k, raw[i].tobytes()) for i, k in enumerate(keys))
    set_s = time.perf_counter() - t0
    cache.close()
    return keys_s, get_s, set_s


def print_table(out: dict[str, Any]) -> None:
    n, raw_s, ragopt_s = out["n_texts"], out["raw_s"], out["ragopt_s"]
    print(f"SciFact, {n} texts, {out['threads']} thread(s), batch {out['batch_size']}, device {out['device']}")
    print(f"  raw sentence-transformers encode  {raw_s:8.1f} s  {out['raw_texts_per_s']:8.1f} texts/s")
    print(f"  ragopt build_index                {ragopt_s:8.1f} s  {out['ragopt_texts_per_s']:8.1f} texts/s")
    print(f"  ratio (ragopt / raw)              {out['ratio']:8.3f}   (in CPU time: {out['ratio_cpu_time']:.3f})")
    c = out["cache_us_per_text"]
    print(f"  cache per text: keys {c['keys']:.0f} us, get_many {c['get_many']:.0f} us, set_many {c['set_many']:.0f} us "
          f"({out['cache_share_of_raw_encode']:.1%} of the raw encode time)")


def main() -> int:
    args = parse_args()
    if not (args.dataset / "corpus.jsonl").exists():
        print(f"bench_indexing: dataset not found: {args.dataset} (a BEIR folder with corpus.jsonl)", file=sys.stderr)
        return 2
    if args.docs < 0 or args.threads < 1 or args.batch_size < 1:
        print("bench_indexing: --docs must be >= 0, --threads and --batch-size >= 1", file=sys.stderr)
        return 2

    import torch

    torch.set_num_threads(args.threads)
    docs = load_beir(args.dataset).documents
    docs = docs[: args.docs] if args.docs else docs
    texts = [Chunk(id=d.id, doc_id=d.id, start=0, end=len(d.text), text=d.text, title=d.title).indexed_text for d in docs]
    config = EmbedderConfig(batch_size=args.batch_size, threads=args.threads, device=args.device)
    resources = Resources()

    with tempfile.TemporaryDirectory(prefix="bench-indexing-") as tmp:
        ws = Path(tmp) / "ws"
        embedder = make_embedder(ws, config, resources)
        model = embedder.model  # loaded (and warmed up) before either clock starts
        model.encode(texts[:8], batch_size=args.batch_size)
        print(f"[bench_indexing] {len(texts)} texts, {args.threads} thread(s), batch {args.batch_size}, device {embedder.device}", file=sys.stderr)

        raw, raw_s, raw_cpu = timed(lambda: model.encode(
            texts, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False))
        print(f"[bench_indexing] raw encode: {raw_s:.1f} s", file=sys.stderr)

        report, ragopt_s, ragopt_cpu = timed(lambda: build_index(docs, ChunkerConfig(chunker="whole"), embedder, ws, progress=False))
        print(f"[bench_indexing] ragopt build_index: {ragopt_s:.1f} s", file=sys.stderr)
        assert report.embedded == len(texts), "the fresh workspace should have embedded every text"
        vectors = np.asarray(np.load(report.index.path / "vectors" / "vectors.npy"))
        positions = np.load(report.index.path / "vectors" / "positions.npy")
        same = float(np.min(np.sum(vectors * raw[positions], axis=1)))  # cosine of each stored vector with raw's

        keys_s, get_s, set_s = cache_cost(embedder, texts, raw, Path(tmp) / "cache-probe")
        embedder.cache.close()
    resources.close()

    n = len(texts)
    out = {
        "ratio": (n / ragopt_s) / (n / raw_s),
        "ratio_cpu_time": raw_cpu / ragopt_cpu,  # the same ratio in process CPU time: blind to other processes' load
        "raw_cpu_s": raw_cpu, "ragopt_cpu_s": ragopt_cpu,
        "raw_texts_per_s": n / raw_s, "ragopt_texts_per_s": n / ragopt_s, "raw_s": raw_s, "ragopt_s": ragopt_s,
        "n_texts": n, "threads": args.threads, "batch_size": args.batch_size, "device": embedder.device,
        "min_cosine_ragopt_vs_raw": same,
        "cache_us_per_text": {"keys": keys_s / n * 1e6, "get_many": get_s / n * 1e6, "set_many": set_s / n * 1e6},
        "cache_share_of_raw_encode": (keys_s + get_s + set_s) / raw_s,
    }  # fmt: skip
    if args.json:
        print(json.dumps(out))
    else:
        print_table(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
