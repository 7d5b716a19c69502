#!/usr/bin/env python3
"""Embedded vector engines on SciFact passages, filtered by tenant: p50/p95 per query and recall@10 vs exact.

    python benchmarks/bench_vector.py [--sizes 20000,100000] [--queries 300] [--local-queries 30] [--json]

The real part: every SciFact document (title + text, one chunk each, as `ragopt index` builds it) embedded
with MiniLM through ragopt (cached in the workspace, so only the first run pays), and the test claims as
queries. To reach 20k and 100k rows, the real vectors are repeated with Gaussian noise (sigma 0.03 per
dimension, then renormalized: each copy keeps a cosine of about 0.85 with its original), so the extra rows
are near-duplicates of real passages, not random points; the output says how many rows are real. Rows
belong to tenant "north" (45%), "south" (45%) or everyone (10%); each query is asked as one of the two
tenants, so every search is filtered.

Engines, each through the same search call the pipeline makes where ragopt has it:
  numpy-exact          ragopt's default embedded store (ragopt/backends/exact_store.py)
  qdrant-edge          qdrant-edge-py's in-process shard, HNSW + keyword payload index (if installed)
  qdrant-edge-exact    the same shard with exact=True
  qdrant-client-local  qdrant-client's local mode (":memory:"), ragopt's previous embedded store; slow, so
                       only --local-queries queries per size
recall_at_10 is against a brute-force reference computed here (full matrix product, mask, stable sort).
Queries run one at a time, BLAS pinned to one thread (one request, one thread).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy is imported: one thread, like one request

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

from ragopt.backends.exact_store import ENGINE as DEFAULT_ENGINE  # noqa: E402
from ragopt.backends.exact_store import ExactStore  # noqa: E402
from ragopt.backends.qdrant_store import QdrantStore  # noqa: E402
from ragopt.config import ChunkerConfig, EmbedderConfig, StoreConfig  # noqa: E402
from ragopt.data.beir import load_beir  # noqa: E402
from ragopt.index import build_index, make_embedder  # noqa: E402
from ragopt.resources import Resources  # noqa: E402
from ragopt.trace import percentiles  # noqa: E402
from ragopt.types import Chunk, Query  # noqa: E402
from ragopt.workspace import workspace_dir  # noqa: E402

DEFAULT_DATASET = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact"
TENANTS = ("north", "south")
NOISE_SIGMA = 0.03
ENGINES = ("numpy-exact", "qdrant-edge", "qdrant-edge-exact", "qdrant-client-local")
Search = Callable[[np.ndarray, int, Query], list[tuple[int, float]]]


def log(msg: str) -> None:
    print(f"[bench_vector] {msg}", file=sys.stderr, flush=True)


def grow(real: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n rows: the real vectors, then noisy copies of them (renormalized) until there are n."""
    reps = -(-n // len(real))
    rows = np.tile(real, (reps, 1))[:n].copy()
    noisy = slice(len(real), n)
    rows[noisy] += rng.normal(scale=NOISE_SIGMA, size=rows[noisy].shape).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def assign_owners(n: int, rng: np.random.Generator) -> list[str | None]:
    draw = rng.random(n)
    return [None if d < 0.10 else TENANTS[int(d < 0.55)] for d in draw]


def reference_top10(vectors: np.ndarray, owners: np.ndarray, q: np.ndarray, tenant: str) -> list[int]:
    scores = vectors @ (q / np.linalg.norm(q))
    allowed = np.flatnonzero((owners == tenant) | (owners == "*"))
    order = allowed[np.argsort(-scores[allowed], kind="stable")]
    return order[:10].tolist()


def time_engine(search: Search, queries: np.ndarray, asked: list[Query], n_queries: int) -> tuple[list[float], list[list[int]]]:
    for i in range(min(3, n_queries)):  # warm-up: lazy loads, page cache, permission masks
        search(queries[i], 10, asked[i])
    ms, found = [], []
    for i in range(n_queries):
        t0 = time.perf_counter()
        hits = search(queries[i], 10, asked[i])
        ms.append((time.perf_counter() - t0) * 1000)
        found.append([p for p, _ in hits])
    return ms, found


def edge_engine(folder: Path, vectors: np.ndarray, owners: list[str | None], exact: bool) -> tuple[Search, float] | None:
    try:
        import qdrant_edge as qe
    except ImportError:
        return None
    t0 = time.perf_counter()
    config = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=vectors.shape[1], distance=qe.Distance.Cosine), max_search_threads=1)
    shard = qe.EdgeShard.create(str(folder), config)
    shard.update(qe.UpdateOperation.create_field_index("tenant", qe.PayloadSchemaType.Keyword))
    for b in range(0, len(vectors), 2000):
        points = [qe.Point(i, vectors[i].tolist(), {"tenant": owners[i] or "*"}) for i in range(b, min(b + 2000, len(vectors)))]
        shard.update(qe.UpdateOperation.upsert_points(points))
    if not exact:
        shard.optimize()  # builds the HNSW graph
    build_s = time.perf_counter() - t0
    params = qe.SearchParams(exact=exact)

    def search(q: np.ndarray, k: int, query: Query) -> list[tuple[int, float]]:
        flt = qe.Filter(must=[qe.FieldCondition(key="tenant", match=qe.MatchAny(any=[query.tenant, "*"]))])
        points = shard.query(qe.QueryRequest(limit=k, query=qe.Query.Nearest(q.tolist()), filter=flt, params=params))
        return [(int(p.id), float(p.score)) for p in points]

    return search, build_s


def row_chunks(owners: list[str | None]) -> list[Chunk]:
    """One empty chunk per row, carrying only the row's tenant: what ragopt's stores filter on."""
    return [Chunk(id=str(i), doc_id=str(i), start=0, end=0, text="", tenant=o) for i, o in enumerate(owners)]


def make_engine(engine: str, n: int, vectors: np.ndarray, owners: list[str | None], scratch: Path,
                resources: Resources) -> tuple[Search, float] | None:
    """The engine's search over `vectors` (row i owned by owners[i]) and its build seconds; None when
    qdrant-edge-py is not installed."""
    t0 = time.perf_counter()
    if engine == "numpy-exact":
        store = ExactStore(scratch / f"exact-{n}")
        store.create(vectors.shape[1])
        store.upsert(row_chunks(owners), vectors)
        return store.search, time.perf_counter() - t0
    if engine == "qdrant-client-local":
        local = QdrantStore("bench", StoreConfig(url=":memory:"), resources)
        local.create(vectors.shape[1])
        local.upsert(row_chunks(owners), vectors, batch=2000)
        return local.search, time.perf_counter() - t0
    return edge_engine(scratch / f"{engine}-{n}", vectors, owners, exact=engine.endswith("exact"))


def measure_size(n: int, real: np.ndarray, queries: np.ndarray, asked: list[Query], rng: np.random.Generator,
                 scratch: Path, args: argparse.Namespace) -> dict[str, Any] | None:
    """Every engine of --engines over n rows grown from `real`; None (said on stderr) for an unknown engine."""
    vectors = grow(real, n, rng)
    owners = assign_owners(n, rng)
    owner_arr = np.array([o or "*" for o in owners])
    n_q = len(queries)
    log(f"{n} rows: brute-force reference for {n_q} queries ...")
    reference = [reference_top10(vectors, owner_arr, queries[i], asked[i].tenant or "") for i in range(n_q)]
    results: dict[str, Any] = {}
    for engine in args.engines.split(","):
        if engine not in ENGINES:
            print(f"bench_vector: unknown engine {engine!r}", file=sys.stderr)
            return None
        with Resources() as resources:  # closes qdrant-client's in-memory store before the next engine
            made = make_engine(engine, n, vectors, owners, scratch, resources)
            if made is None:
                results[engine] = {"skipped": "qdrant-edge-py is not installed (pip install qdrant-edge-py)"}
                continue
            search, build_s = made
            count = min(n_q, args.local_queries) if engine == "qdrant-client-local" else n_q  # local mode is slow
            log(f"{n} rows: {engine} built in {build_s:.1f} s; {count} filtered queries ...")
            ms, found = time_engine(search, queries, asked, count)
        recall = float(np.mean([len(set(f) & set(r)) / max(len(r), 1) for f, r in zip(found, reference)]))
        lat = percentiles(ms)
        results[engine] = {"p50_ms": lat["p50"], "p95_ms": lat["p95"], "recall_at_10": recall, "queries": count, "build_s": build_s}
    base = results.get("qdrant-client-local", {}).get("p50_ms")
    if base:
        for engine, r in results.items():
            if "p50_ms" in r:
                r["speedup_p50_vs_qdrant_client_local"] = base / r["p50_ms"]
    return results


def embed_scifact(args: argparse.Namespace) -> tuple[str, np.ndarray, np.ndarray, list[Query]]:
    """The dataset's name, its passage vectors in chunk order, --queries query vectors (the test claims, repeated
    as needed) and the Query each is asked as (alternating tenants)."""
    evalset = load_beir(args.dataset)
    ws = workspace_dir(args.workspace)
    embedder = make_embedder(ws, EmbedderConfig(threads=1))
    log(f"embedding {len(evalset.documents)} SciFact passages (cached after the first run) ...")
    index = build_index(evalset.documents, ChunkerConfig(mode="whole"), embedder, ws, progress=not args.json).index
    real = np.asarray(np.load(index.path / "vectors" / "vectors.npy"))
    real = real[np.argsort(np.load(index.path / "vectors" / "positions.npy"))]  # back to chunk order
    query_texts = [q.query.text for q in evalset.queries]
    reps = -(-args.queries // len(query_texts))
    queries = np.tile(embedder.encode(query_texts).vectors, (reps, 1))[: args.queries]
    asked = [Query(text="", tenant=TENANTS[i % 2]) for i in range(len(queries))]
    return evalset.name, real, queries, asked


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="a BEIR folder (default: ../shared/data/scifact)")
    ap.add_argument("--sizes", default="20000,100000", help="comma-separated row counts")
    ap.add_argument("--queries", type=int, default=300, help="filtered queries per engine and size")
    ap.add_argument("--local-queries", type=int, default=30, help="queries for qdrant-client local mode (slow)")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--workspace", default=None, help="where the SciFact embeddings are cached (default: RAGOPT_HOME or ./.ragopt)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    return ap.parse_args()


def print_table(out: dict[str, Any]) -> None:
    print(f"{out['dataset']}: {out['n_real']} real passage vectors, grown with noisy copies; filtered by tenant, top-10, 1 thread")
    print(f"  {'rows':>7} {'engine':<20} {'p50 ms':>8} {'p95 ms':>8} {'recall@10':>9} {'queries':>7} {'build s':>8}")
    for n, results in out["sizes"].items():
        for engine, r in results.items():
            if "skipped" in r:
                print(f"  {n:>7} {engine:<20} skipped: {r['skipped']}")
            else:
                print(f"  {n:>7} {engine:<20} {r['p50_ms']:>8.2f} {r['p95_ms']:>8.2f} {r['recall_at_10']:>9.3f} {r['queries']:>7} {r['build_s']:>8.1f}")
    print(f"default embedded engine: {out['default']}")


def main() -> int:
    args = parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
        assert sizes and all(s > 0 for s in sizes)
    except (ValueError, AssertionError):
        print(f"bench_vector: --sizes must be positive integers separated by commas, not {args.sizes!r}", file=sys.stderr)
        return 2
    if not (args.dataset / "corpus.jsonl").exists():
        print(f"bench_vector: dataset not found: {args.dataset} (a BEIR folder with corpus.jsonl)", file=sys.stderr)
        return 2

    dataset, real, queries, asked = embed_scifact(args)
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {
        "default": DEFAULT_ENGINE, "dataset": dataset, "n_real": len(real), "noise_sigma": NOISE_SIGMA,
        "rows": "the real passage vectors, then noisy copies of them up to each size",
        "tenants": {"north": 0.45, "south": 0.45, "shared": 0.10}, "k": 10, "threads": 1, "sizes": {},
    }  # fmt: skip
    scratch = Path(tempfile.mkdtemp(prefix="bench-vector-"))
    try:
        for n in sizes:
            results = measure_size(n, real, queries, asked, rng, scratch, args)
            if results is None:
                return 2
            out["sizes"][str(n)] = results
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    if args.json:
        print(json.dumps(out))
    else:
        print_table(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
