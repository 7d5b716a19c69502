#!/usr/bin/env python3
"""Vector stores on SciFact passages, filtered by tenant: p50/p95 per query, recall@10 against exact, build time,
resident memory, disk size, open time, a 1% tenant's line, and the time to update 1% of the points.

    python benchmarks/bench_vector.py [--sizes 20000,100000] [--queries 300] [--engines numpy-exact,qdrant-edge]
        [--edge int8,none] [--hnsw-m 16,32] [--hnsw-ef-construct 100,200] [--ef 32,64,128,256] [--oversampling 2,4]
        [--passages 500] [--update-sizes 100000] [--json]

The real part: every SciFact document (title + text, one chunk each, as `ragopt index` builds it) embedded with
MiniLM through ragopt (cached in the workspace, so only the first run pays), and the test claims as queries. To
reach each size, the real vectors are repeated with Gaussian noise (sigma 0.03 per dimension, then renormalized:
each copy keeps a cosine of about 0.85 with its original), so the extra rows are near-duplicates of real passages,
not random points. Rows belong to tenant "north" (44.5%), "south" (44.5%), "small" (1%) or everyone (10%); each
query is asked as north or south (the main line), and again as "small" (the 1% tenant's line).

Engines, each through ragopt's own store class (the search call the pipeline makes):
  numpy-exact          ragopt's exact store (ragopt/backends/exact_store.py): the baseline, recall 1.0
  qdrant-edge          ragopt's qdrant-edge store (ragopt/backends/edge_store.py), one shard per --edge setting,
                       --hnsw-m and --hnsw-ef-construct (int8: scalar quantization with rescoring, originals on disk;
                       none: float32 in memory), searched at every --ef
Build runs in this process; open, queries and memory are measured in a fresh child process per store (one thread,
one query at a time): open_s is the store's first load, rss_mb the child's resident memory after the queries
minus its resident memory before opening (file pages a store maps and touches count). recall_at_10 is against a
brute-force reference computed here (full matrix product, mask, stable sort). update_s: delete 1% of the points and
upsert new vectors for as many (qdrant-edge: in place; numpy-exact: its bulk rewrite), against build_s.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy is imported: one thread, like one request

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from ragopt.backends.edge_store import EdgeStore, chunk_keys  # noqa: E402
from ragopt.backends.exact_store import ExactStore  # noqa: E402
from ragopt.config import ChunkerConfig, EmbedderConfig, StoreConfig  # noqa: E402
from ragopt.data.beir import load_beir  # noqa: E402
from ragopt.index import build_index, make_embedder  # noqa: E402
from ragopt.trace import percentiles  # noqa: E402
from ragopt.types import Chunk, Query  # noqa: E402
from ragopt.workspace import workspace_dir  # noqa: E402

DEFAULT_DATASET = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact"
TENANTS = ("north", "south")
SMALL = "small"
NOISE_SIGMA = 0.03
ENGINES = ("numpy-exact", "qdrant-edge")
DEFAULT_STORE = StoreConfig()  # the large-corpus default: what `auto` builds from AUTO_EDGE_MIN_CHUNKS chunks up


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
    return [None if d < 0.10 else SMALL if d < 0.11 else TENANTS[int(d < 0.555)] for d in draw]


def reference_top10(vectors: np.ndarray, owners: np.ndarray, queries: np.ndarray, tenants: list[str]) -> list[list[int]]:
    """The exact top 10 of each query among the rows its tenant may see, in blocks of 50 queries."""
    out: list[list[int]] = []
    for b in range(0, len(queries), 50):
        scores = vectors @ queries[b : b + 50].T
        for j, tenant in enumerate(tenants[b : b + 50]):
            allowed = np.flatnonzero((owners == tenant) | (owners == "*"))
            out.append(allowed[np.argsort(-scores[allowed, j], kind="stable")[:10]].tolist())
    return out


def row_chunks(owners: list[str | None]) -> list[Chunk]:
    """One empty chunk per row, carrying only the row's tenant: what ragopt's stores filter on."""
    return [Chunk(id=str(i), doc_id=str(i), start=0, end=0, text="", tenant=o) for i, o in enumerate(owners)]


def edge_config(shard: dict[str, Any], ef: int = 128, oversampling: float = 2.0) -> StoreConfig:
    """The store config of one shard shape (quantization, m, ef_construct) searched at ef and oversampling."""
    return StoreConfig(engine="qdrant-edge", quantization=shard["setting"], hnsw_m=shard["m"], hnsw_ef=ef,
                       hnsw_ef_construct=shard["ef_construct"], oversampling=oversampling)


def shard_name(shard: dict[str, Any]) -> str:
    return f"qdrant-edge-{shard['setting']}-m{shard['m']}-efc{shard['ef_construct']}"


def search_label(ef: int, oversampling: float, args_oversampling: list[float]) -> str:
    """The results key of one search setting: the ef, and the oversampling where more than the default is tried."""
    return str(ef) if args_oversampling == [2.0] else f"{ef}/os{oversampling:g}"


def build(engine: str, shard: dict[str, Any] | None, folder: Path, vectors: np.ndarray, chunks: list[Chunk]) -> float:
    t0 = time.perf_counter()
    if engine == "numpy-exact":
        store: Any = ExactStore(folder)
        store.create(vectors.shape[1])
        store.upsert(chunks, vectors)
    else:
        store = EdgeStore(folder, edge_config(shard))
        store.create(vectors.shape[1])
        store.upsert(chunks, vectors)
        store.optimize()
    store.close()
    return time.perf_counter() - t0


def update_one_percent(engine: str, shard: dict[str, Any] | None, folder: Path, vectors: np.ndarray, chunks: list[Chunk],
                       rng: np.random.Generator) -> dict[str, float]:
    """Replace 1% of the points by new vectors (new text: new point ids); seconds, and the share of replaced points
    that a search by their new vector then finds first."""
    n = len(chunks)
    changed = rng.choice(n, size=max(1, n // 100), replace=False)
    new_vectors = grow(vectors[changed], len(changed) * 2, rng)[len(changed):]  # noisy copies: new vectors
    new_chunks = [chunks[i].model_copy(update={"text": "changed"}) for i in changed]
    t0 = time.perf_counter()
    if engine == "numpy-exact":
        store: Any = ExactStore(folder)
        for j, i in enumerate(changed):  # the exact store rewrites its files in bulk: one call for all rows
            vectors[i] = new_vectors[j]
        store.upsert(chunks, vectors)
    else:
        store = EdgeStore(folder, edge_config(shard))
        new_ids = int(store.ids.max()) + 1 + np.arange(len(changed))
        store.apply(store.ids[changed].tolist(), new_ids, new_chunks, new_vectors)
        ids, keys = store.ids.copy(), store.keys.copy()
        ids[changed], keys[changed] = new_ids, chunk_keys(new_chunks)
        store.write_ids(ids, keys)
    update_s = time.perf_counter() - t0
    probe = changed[:100]
    firsts = [store.search(new_vectors[j], 1, Query(text="", tenant=chunks[i].tenant or TENANTS[0])) for j, i in enumerate(probe)]
    store.close()
    return {"update_s": update_s, "points": len(changed), "found_first_after_update": float(np.mean([bool(f) and f[0][0] == i for f, i in zip(firsts, probe)]))}


def probe(engine: str, shard: dict[str, Any] | None, folder: Path, qfile: Path, tenants: list[str],
          searches: list[tuple[str, int, float]]) -> dict[str, Any]:
    """Open the store and run the queries in a fresh child process, once per (label, ef, oversampling); its JSON."""
    cmd = [sys.executable, __file__, "--probe", json.dumps({"engine": engine, "shard": shard, "folder": str(folder),
                                                            "queries": str(qfile), "tenants": tenants, "searches": searches})]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    if done.returncode != 0:
        raise RuntimeError(f"probe failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_probe(spec: dict[str, Any]) -> dict[str, Any]:
    """The child: open, warm up, then every query one at a time, for each ef; timings and what was found."""
    queries = np.load(spec["queries"])
    asked = [Query(text="", tenant=t) for t in spec["tenants"]]
    before = rss_mb()
    out: dict[str, Any] = {"runs": {}}
    for label, ef, oversampling in spec["searches"]:
        t0 = time.perf_counter()
        store: Any = (ExactStore(spec["folder"]) if spec["engine"] == "numpy-exact"
                      else EdgeStore(spec["folder"], edge_config(spec["shard"], ef, oversampling=oversampling)))
        if isinstance(store, EdgeStore):
            store.open()
        else:
            store.search(queries[0], 10, asked[0])  # the exact store maps its files on first use
        out.setdefault("open_s", time.perf_counter() - t0)
        for i in range(min(3, len(queries))):
            store.search(queries[i], 10, asked[i])
        ms, found = [], []
        for q, a in zip(queries, asked):
            t1 = time.perf_counter()
            hits = store.search(q, 10, a)
            ms.append((time.perf_counter() - t1) * 1000)
            found.append([p for p, _ in hits])
        out["runs"][label] = {"ms": ms, "found": found}
        out.setdefault("rss_mb", rss_mb() - before)
        store.close()
    return out


def disk_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def summarize(got: dict[str, Any], reference: list[list[int]], n_main: int) -> dict[str, Any]:
    def line(ms: list[float], found: list[list[int]], ref: list[list[int]]) -> dict[str, Any]:
        lat = percentiles(ms)
        recall = float(np.mean([len(set(f) & set(r)) / max(len(r), 1) for f, r in zip(found, ref)]))
        return {"p50_ms": lat["p50"], "p95_ms": lat["p95"], "recall_at_10": recall, "queries": len(ms),
                "short_lists": sum(len(f) < len(r) for f, r in zip(found, ref))}

    lines = {}
    for ef, r in got["runs"].items():
        lines[ef] = {"tenant": line(r["ms"][:n_main], r["found"][:n_main], reference[:n_main]),
                     "small_tenant": line(r["ms"][n_main:], r["found"][n_main:], reference[n_main:])}
    return lines


def measure_size(n: int, real: np.ndarray, queries: np.ndarray, rng: np.random.Generator, scratch: Path,
                 args: argparse.Namespace) -> dict[str, Any]:
    vectors = grow(real, n, rng)
    owners = assign_owners(n, rng)
    chunks = row_chunks(owners)
    owner_arr = np.array([o or "*" for o in owners])
    tenants = [TENANTS[i % 2] for i in range(len(queries))] + [SMALL] * len(queries)
    all_queries = np.concatenate([queries, queries])
    log(f"{n} rows: brute-force reference for {len(all_queries)} queries ...")
    reference = reference_top10(vectors, owner_arr, all_queries, tenants)
    qfile = scratch / "queries.npy"
    np.save(qfile, all_queries)
    results: dict[str, Any] = {}
    for engine in args.engines.split(","):
        for shard in (args.shards if engine == "qdrant-edge" else [None]):  # exact search has no shard settings
            name = shard_name(shard) if shard else engine
            folder = scratch / f"{name}-{n}"
            log(f"{n} rows: building {name} ...")
            build_s = build(engine, shard, folder, vectors, chunks)
            searches = ([(search_label(ef, o, args.oversamplings), ef, o) for ef in args.efs for o in args.oversamplings]
                        if engine == "qdrant-edge" else [("0", 0, 2.0)])
            log(f"{n} rows: {name} built in {build_s:.1f} s; probing {len(all_queries)} filtered queries at "
                f"{', '.join(label for label, _, _ in searches)} ...")
            got = probe(engine, shard, folder, qfile, tenants, searches)
            r = {"build_s": build_s, "open_s": got["open_s"], "rss_mb": got["rss_mb"], "disk_mb": disk_mb(folder),
                 "by_ef": summarize(got, reference, len(queries))}
            if n in args.update_sizes:
                log(f"{n} rows: updating 1% of {name} ...")
                r["update"] = update_one_percent(engine, shard, folder, vectors.copy(), chunks, rng)
                r["update"]["share_of_build"] = r["update"]["update_s"] / build_s
            results[name] = r
            shutil.rmtree(folder, ignore_errors=True)
            log(f"{n} rows: {name}: {json.dumps(r)}")  # whole: a run killed later still leaves these figures
    return {"engines": results, "matrix_mb": vectors.nbytes / 2**20}


def embed_scifact(args: argparse.Namespace) -> tuple[str, np.ndarray, np.ndarray]:
    """The dataset's name, its passage vectors in chunk order and --queries query vectors (the test claims,
    repeated as needed)."""
    evalset = load_beir(args.dataset)
    ws = workspace_dir(args.workspace)
    embedder = make_embedder(ws, EmbedderConfig(threads=1))
    log(f"embedding {len(evalset.documents)} SciFact passages (cached after the first run) ...")
    index = build_index(evalset.documents, ChunkerConfig(chunker="whole"), embedder, ws, progress=not args.json,
                        store_config=StoreConfig(engine="exact")).index
    real = np.asarray(np.load(index.path / "vectors" / "vectors.npy"))
    real = real[np.argsort(np.load(index.path / "vectors" / "positions.npy"))]  # back to chunk order
    query_texts = [q.query.text for q in evalset.queries]
    reps = -(-args.queries // len(query_texts))
    queries = np.tile(embedder.encode(query_texts).vectors, (reps, 1))[: args.queries]
    return evalset.name, real, queries / np.linalg.norm(queries, axis=1, keepdims=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="a BEIR folder (default: ../shared/data/scifact)")
    ap.add_argument("--sizes", default="20000,100000", help="comma-separated row counts")
    ap.add_argument("--queries", type=int, default=300, help="filtered queries per engine and size (asked again by the 1%% tenant)")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--edge", default="int8", help="qdrant-edge shards to build: int8 and/or none (quantization)")
    ap.add_argument("--hnsw-m", default=str(DEFAULT_STORE.hnsw_m), help="qdrant-edge: HNSW edges per node, one shard each")
    ap.add_argument("--hnsw-ef-construct", default=str(DEFAULT_STORE.hnsw_ef_construct),
                    help="qdrant-edge: HNSW build candidates, one shard each (with every --hnsw-m)")
    ap.add_argument("--ef", default=f"256,512,{DEFAULT_STORE.hnsw_ef}", help="qdrant-edge: HNSW ef values to search each shard with")
    ap.add_argument("--oversampling", default="2", help="qdrant-edge int8: candidates rescored per hit, each tried at every ef")
    ap.add_argument("--passages", type=int, default=None,
                    help="grow from this many real passages (a seeded sample) instead of all: 500 at 96,500 rows has "
                         "the near-duplicates per passage of all of them at 1M, in a tenth of the build")
    ap.add_argument("--update-sizes", default="100000", help="sizes at which 1%% of the points are updated")
    ap.add_argument("--scratch", type=Path, default=None, help="where stores are built (default: a temporary folder)")
    ap.add_argument("--workspace", default=None, help="where the SciFact embeddings are cached (default: RAGOPT_HOME or ./.ragopt)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def store_values(raw: str, field: str, cast: type) -> list[Any] | None:
    """A comma-separated flag's values, each valid for StoreConfig's `field`; None when one is not."""
    try:
        values = [cast(v) for v in raw.split(",")]
        for v in values:
            StoreConfig(**{field: v})
    except ValueError:
        return None
    return values


def check_args(args: argparse.Namespace) -> str | None:
    """One line naming the bad flag, or None."""
    try:
        args.sizes = [int(s) for s in args.sizes.split(",")]
        args.update_sizes = [int(s) for s in args.update_sizes.split(",") if s]
        assert args.sizes and all(s > 0 for s in args.sizes)
    except (ValueError, AssertionError):
        return f"--sizes/--update-sizes must be positive integers separated by commas, not {args.sizes!r}"
    if any(e not in ENGINES for e in args.engines.split(",")):
        return f"--engines: known are {', '.join(ENGINES)}, not {args.engines!r}"
    if any(s not in ("int8", "none") for s in args.edge.split(",")):
        return f"--edge: int8 or none, not {args.edge!r}"
    for flag, field, cast in (("--hnsw-m", "hnsw_m", int), ("--hnsw-ef-construct", "hnsw_ef_construct", int),
                              ("--ef", "hnsw_ef", int), ("--oversampling", "oversampling", float)):
        dest = flag[2:].replace("-", "_")
        values = store_values(getattr(args, dest), field, cast)
        if values is None:
            limits = StoreConfig.model_fields[field].metadata
            low, high = (next(getattr(m, a) for m in limits if hasattr(m, a)) for a in ("ge", "le"))
            kind = "integers" if cast is int else "numbers"
            return f"{flag} must be {kind} from {low:g} to {high:g} separated by commas, not {getattr(args, dest)!r}"
        setattr(args, dest + "s", values)  # --ef 64,128 -> args.efs == [64, 128]
    args.shards = [{"setting": q, "m": m, "ef_construct": efc} for q in args.edge.split(",")
                   for m in args.hnsw_ms for efc in args.hnsw_ef_constructs]
    if args.passages is not None and args.passages <= 0:
        return f"--passages must be positive, not {args.passages}"
    if args.queries <= 0:
        return f"--queries must be positive, not {args.queries}"
    if not (args.dataset / "corpus.jsonl").exists():
        return f"--dataset: not found: {args.dataset} (a BEIR folder with corpus.jsonl)"
    return None


def print_table(out: dict[str, Any]) -> None:
    print(f"{out['dataset']}: {out['n_real']} real passage vectors, grown with noisy copies; filtered by tenant, top-10, 1 thread")
    print(f"  {'rows':>8} {'engine':<28} {'ef':>9} {'tenant':<6} {'p50 ms':>7} {'p95 ms':>7} {'recall@10':>9} {'vs exact p50':>12} "
          f"{'build s':>8} {'open s':>6} {'RSS MB':>7} {'disk MB':>8}")
    for n, size in out["sizes"].items():
        base = size["engines"].get("numpy-exact", {}).get("by_ef", {}).get("0", {})
        for name, r in size["engines"].items():
            for ef, lines in r["by_ef"].items():
                for who, line in lines.items():
                    ratio = base.get(who, {}).get("p50_ms", float("nan")) / line["p50_ms"]
                    print(f"  {n:>8} {name:<28} {ef:>9} {'1%' if who == 'small_tenant' else '45%':<6} {line['p50_ms']:>7.2f} "
                          f"{line['p95_ms']:>7.2f} {line['recall_at_10']:>9.3f} {ratio:>11.1f}x {r['build_s']:>8.1f} "
                          f"{r['open_s']:>6.2f} {r['rss_mb']:>7.0f} {r['disk_mb']:>8.0f}")
            if "update" in r:
                u = r["update"]
                print(f"  {n:>8} {name:<28} update of {u['points']} points: {u['update_s']:.2f} s = {u['share_of_build']:.1%} of "
                      f"the build; found first after it {u['found_first_after_update']:.2f}")
        print(f"  {n:>8} float32 matrix: {size['matrix_mb']:.0f} MB")


def main() -> int:
    args = parse_args()
    if args.probe:
        print(json.dumps(run_probe(json.loads(args.probe))))
        return 0
    problem = check_args(args)
    if problem:
        print(f"bench_vector: {problem}", file=sys.stderr)
        return 2
    dataset, real, queries = embed_scifact(args)
    rng = np.random.default_rng(0)
    if args.passages:
        real = real[np.sort(rng.choice(len(real), min(args.passages, len(real)), replace=False))]
    out: dict[str, Any] = {
        "dataset": dataset, "n_real": len(real), "passages": args.passages, "noise_sigma": NOISE_SIGMA, "date": time.strftime("%Y-%m-%d"),
        "rows": "the real passage vectors, then noisy copies of them up to each size",
        "tenants": {"north": 0.445, "south": 0.445, SMALL: 0.01, "shared": 0.10}, "k": 10, "threads": 1, "sizes": {},
    }  # fmt: skip
    scratch = Path(tempfile.mkdtemp(prefix="bench-vector-", dir=args.scratch))
    try:
        for n in args.sizes:
            out["sizes"][str(n)] = measure_size(n, real, queries, rng, scratch, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        print(json.dumps(out))
    else:
        print_table(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
