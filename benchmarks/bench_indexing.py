#!/usr/bin/env python3
"""Indexing throughput against the raw encoder: `ragopt index`'s build vs sentence-transformers alone.

    python benchmarks/bench_indexing.py [--docs 1000] [--threads 1] [--batch-size 64] [--device auto] [--json]
    python benchmarks/bench_indexing.py --scenario pipeline [--rounds 2] [--docs 1000] [--threads 1] [--json]

Both encode the same SciFact texts (title + text of the first --docs documents, one chunk each, as
`ragopt index` builds by default) with the same model object, batch size, device and torch threads, one run
each, the model loaded before either clock starts. "raw" is one `SentenceTransformer.encode` call over all
texts; "ragopt" is `build_index` into a fresh workspace: chunking, cache lookups, length-sorted encoding in
blocks, cache writes, the vector store and the manifest. `ratio` = ragopt texts/s over raw texts/s (1.0: no
overhead at all), wall-clock; `ratio_cpu_time` is the same in process CPU time, which other processes on a
busy machine do not distort. The cache's own cost is measured apart: building the keys, one `get_many` over all texts
and one `set_many` of all vectors (one transaction), in microseconds per text.

`--scenario pipeline`: a qdrant-edge shard written in bulk (every text embedded, then every point upserted, then the
graph: the path before the bounded pipeline) against the pipeline ragopt uses (`ragopt.index.vectors._write_edge`:
points upserted in a second thread while the next block is embedded), each into a fresh cache and shard, the same
texts, model, batch size and threads, `--rounds` alternating rounds (bulk first, then pipeline first, ...), best
of each; `ratio` = bulk seconds / pipeline seconds (above 1: the pipeline is faster). The bulk path's upserts and
graph build are timed apart too: the overlap can hide at most the upserts (the graph is built after the last).
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
    ap.add_argument("--scenario", choices=["indexing", "pipeline"], default="indexing",
                    help="indexing: ragopt's build vs the raw encoder (default); pipeline: a qdrant-edge shard in bulk vs "
                         "written while embedding")
    ap.add_argument("--rounds", type=int, default=2, help="pipeline: alternating rounds, best of each (default 2)")
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


def edge_bulk(chunks: list[Chunk], embedder: Embedder, folder: Path) -> tuple[float, float]:
    """The path before the pipeline: every text embedded, then every point upserted, then the graph. Returns
    (seconds to upsert, seconds to build the graph and close)."""
    from ragopt.backends.edge_store import EdgeStore
    from ragopt.config import StoreConfig

    encoded = embedder.encode([c.indexed_text for c in chunks], [(c.tenant, c.scopes) for c in chunks])
    t0 = time.perf_counter()
    store = EdgeStore(folder, StoreConfig(engine="qdrant-edge"))
    store.create(int(encoded.vectors.shape[1]))
    store.upsert(chunks, encoded.vectors)
    t1 = time.perf_counter()
    store.optimize()
    store.close()
    return t1 - t0, time.perf_counter() - t1


def pipeline_scenario(args: argparse.Namespace, chunks: list[Chunk], config: EmbedderConfig, resources: Resources,
                      tmp: Path) -> dict[str, Any]:
    """Bulk vs pipelined qdrant-edge writes of the same chunks, alternating rounds, each in a fresh cache."""
    from ragopt.backends.edge_store import EdgeStore
    from ragopt.config import StoreConfig
    from ragopt.index.vectors import _write_edge

    runs: dict[str, list[tuple[float, float]]] = {"bulk": [], "pipeline": []}
    writes: list[tuple[float, float]] = []  # the bulk path's (upsert, graph) seconds
    make_embedder(tmp / "warm", config, resources).model.encode([c.indexed_text for c in chunks[:8]])  # loaded before any clock
    for r in range(args.rounds):
        for name in (["bulk", "pipeline"] if r % 2 == 0 else ["pipeline", "bulk"]):
            embedder = make_embedder(tmp / f"ws-{name}-{r}", config, resources)
            if name == "bulk":
                write, wall, cpu = timed(lambda: edge_bulk(chunks, embedder, tmp / f"shard-{name}-{r}"))
                writes.append(write)
            else:
                store = EdgeStore(tmp / f"shard-{name}-{r}", StoreConfig(engine="qdrant-edge"))
                _, wall, cpu = timed(lambda: _write_edge(chunks, embedder, store, False))
            embedder.cache.close()
            runs[name].append((wall, cpu))
            print(f"[bench_indexing] round {r + 1} {name}: {wall:.1f} s", file=sys.stderr)
    bulk, pipe = min(runs["bulk"]), min(runs["pipeline"])
    return {"scenario": "pipeline", "n_texts": len(chunks), "threads": args.threads, "batch_size": args.batch_size,
            "rounds": args.rounds, "bulk_s": bulk[0], "pipeline_s": pipe[0], "ratio": bulk[0] / pipe[0],
            "bulk_cpu_s": bulk[1], "pipeline_cpu_s": pipe[1], "bulk_upsert_s": min(u for u, _ in writes),
            "bulk_graph_s": min(g for _, g in writes), "runs_s": {k: [w for w, _ in v] for k, v in runs.items()},
            "runs_cpu_s": {k: [c for _, c in v] for k, v in runs.items()}}


def print_table(out: dict[str, Any]) -> None:
    if out.get("scenario") == "pipeline":
        print(f"SciFact, {out['n_texts']} texts into a qdrant-edge shard, {out['threads']} thread(s), batch {out['batch_size']}, "
              f"best of {out['rounds']} alternating rounds")
        print(f"  bulk: embed all, then write      {out['bulk_s']:8.1f} s  (upserts {out['bulk_upsert_s']:.2f} s, "
              f"graph {out['bulk_graph_s']:.2f} s)")
        print(f"  pipeline: write while embedding  {out['pipeline_s']:8.1f} s")
        print(f"  ratio (bulk / pipeline)          {out['ratio']:8.3f}")
        return
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
    if args.docs < 0 or args.threads < 1 or args.batch_size < 1 or args.rounds < 1:
        print("bench_indexing: --docs must be >= 0, --threads, --batch-size and --rounds >= 1", file=sys.stderr)
        return 2

    import torch

    torch.set_num_threads(args.threads)
    docs = load_beir(args.dataset).documents
    docs = docs[: args.docs] if args.docs else docs
    texts = [Chunk(id=d.id, doc_id=d.id, start=0, end=len(d.text), text=d.text, title=d.title).indexed_text for d in docs]
    config = EmbedderConfig(batch_size=args.batch_size, threads=args.threads, device=args.device)
    resources = Resources()

    if args.scenario == "pipeline":
        chunks = [Chunk(id=d.id, doc_id=d.id, start=0, end=len(d.text), text=d.text, title=d.title) for d in docs]
        with tempfile.TemporaryDirectory(prefix="bench-indexing-") as tmp:
            out = pipeline_scenario(args, chunks, config, resources, Path(tmp))
        resources.close()
        if args.json:
            print(json.dumps(out))
        else:
            print_table(out)
        return 0

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
