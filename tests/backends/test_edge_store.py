"""The qdrant-edge store: a 1% tenant's filtered query still gets K of its own hits (the filter is a payload index
inside the search, not a cut of a global top K), scopes are honoured, results match exact search, an update in
place is seen by the next search, and a shard reopens with the same answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ragopt.backends.edge_store import EdgeStore, chunk_keys
from ragopt.backends.exact_store import ExactStore
from ragopt.config import StoreConfig
from ragopt.types import Chunk, Query

N, DIM = 3000, 384  # 4.5 MB of vectors: above the size from which a shard builds its HNSW graph


def clustered(n: int, rng: np.random.Generator) -> np.ndarray:
    centres = rng.normal(size=(20, DIM))
    rows = centres[rng.integers(0, 20, n)] + rng.normal(scale=0.3, size=(n, DIM))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def chunks_for(owners: list[str | None], scopes: list[tuple[str, ...]] | None = None) -> list[Chunk]:
    scopes = scopes or [()] * len(owners)
    return [Chunk(id=f"c{i}", doc_id=f"d{i}", start=0, end=1, text=f"t{i}", tenant=o, scopes=s)
            for i, (o, s) in enumerate(zip(owners, scopes))]


def build(folder: Path, chunks: list[Chunk], vectors: np.ndarray, **settings: object) -> EdgeStore:
    store = EdgeStore(folder, StoreConfig(engine="qdrant-edge", **settings))  # type: ignore[arg-type]
    store.create(DIM)
    store.upsert(chunks, vectors)
    store.optimize()
    return store


def test_a_one_percent_tenant_gets_k_of_its_own_hits_as_exact_search_does(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vectors = clustered(N, rng)
    owners: list[str | None] = ["small" if i % 100 == 7 else ("north" if i % 2 else "south") for i in range(N)]
    chunks = chunks_for(owners)
    edge = build(tmp_path / "edge", chunks, vectors)
    assert edge._shard.info().indexed_vectors_count == N  # searched through the graph, not a plain scan
    exact = ExactStore(tmp_path / "exact")
    exact.create(DIM)
    exact.upsert(chunks, vectors)
    small = Query(text="", tenant="small")
    queries = clustered(20, rng)
    recall = []
    for q in queries:
        got = edge.search(q, 10, small)
        assert len(got) == 10 and all(owners[p] == "small" for p, _ in got)
        want = exact.search(q, 10, small)
        recall.append(len({p for p, _ in got} & {p for p, _ in want}) / 10)
        assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)
    assert np.mean(recall) >= 0.95
    # a global top 10 cut afterwards would have found almost none of the small tenant's points
    assert np.mean([sum(owners[p] == "small" for p, _ in exact.search(q, 10, None)) for q in queries]) < 2


def test_scopes_and_shared_points_follow_the_permission_rule(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    vectors = clustered(200, rng)
    owners: list[str | None] = [None if i % 4 == 0 else "north" for i in range(200)]
    scopes = [("hr",) if i % 2 else () for i in range(200)]
    store = build(tmp_path / "edge", chunks_for(owners, scopes), vectors)
    for q in clustered(5, rng):
        plain = store.search(q, 50, Query(text="", tenant="north"))
        assert plain and all(not scopes[p] for p, _ in plain)  # no hr scope: unscoped points only
        hr = store.search(q, 50, Query(text="", tenant="north", scopes=["hr"]))
        assert any(scopes[p] for p, _ in hr)
        other = store.search(q, 50, Query(text="", tenant="south", scopes=["hr"]))
        assert other and all(owners[p] is None for p, _ in other)  # another tenant sees the shared points only


def test_an_update_in_place_is_searched_next_and_the_shard_reopens(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    vectors = clustered(500, rng)
    chunks = chunks_for(["north"] * 500)
    store = build(tmp_path / "edge", chunks, vectors, quantization="none")
    new_vector = -vectors[10]
    changed = chunks[10].model_copy(update={"text": "new text"})
    assert store.ids.tolist() == list(range(500))  # ids in order: Qdrant's graph keeps its recall with them
    store.apply([10], np.array([500]), [changed], new_vector[None, :])
    ids, keys = store.ids.copy(), store.keys.copy()
    ids[10], keys[10] = 500, chunk_keys([changed])[0]
    store.write_ids(ids, keys)
    north = Query(text="", tenant="north")
    assert store.search(new_vector, 1, north)[0][0] == 10
    assert all(p != 10 for p, _ in store.search(vectors[10], 5, north))  # the old vector is gone
    before = store.search(vectors[3], 10, north)
    store.close()
    reopened = EdgeStore(tmp_path / "edge", StoreConfig(engine="qdrant-edge", quantization="none"))
    assert reopened.open() >= 0 and reopened.count() == 500
    assert reopened.search(vectors[3], 10, north) == before
    reopened.close()


def test_a_view_searches_the_open_shard_with_its_own_settings_as_a_fresh_open_does(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    vectors = rng.normal(size=(N, DIM)).astype(np.float32)  # no clusters: a sparse graph misses neighbours here
    store = build(tmp_path / "s", chunks_for([None] * N), vectors, hnsw_m=4, hnsw_ef_construct=8, quantization="none")
    queries = rng.normal(size=(30, DIM)).astype(np.float32)
    narrow = StoreConfig(engine="qdrant-edge", hnsw_m=4, hnsw_ef_construct=8, quantization="none", hnsw_ef=1)
    view = store.searched_with(narrow)
    assert view._shard is store._shard  # the same open shard, not a second one
    got = [view.search(q, 10, None) for q in queries]
    store_hits = [store.search(q, 10, None) for q in queries]  # the store's own (default) ef is untouched
    view.close()  # closes nothing it borrowed
    assert [store.search(q, 10, None) for q in queries] == store_hits
    store.close()
    fresh = EdgeStore(tmp_path / "s", narrow)
    assert [fresh.search(q, 10, None) for q in queries] == got
    assert (view._params().hnsw_ef, store.config.hnsw_ef) == (1, StoreConfig().hnsw_ef)  # each searches with its own settings
    fresh.close()


class StrandedWalk:
    """An injected fault: the shard's graph walk strands after one hit (what a walk through a filtered cluster of
    near-duplicates did at 50k rows); a full scan answers as the real shard does."""

    def __init__(self, shard: object):
        self.shard, self.scans = shard, []

    def query(self, request):  # type: ignore[no-untyped-def]
        self.scans.append(request.params.exact)
        points = self.shard.query(request)  # type: ignore[attr-defined]
        return points if request.params.exact else points[:1]


def test_a_short_list_is_searched_again_by_a_full_scan_and_stays_short_only_when_fewer_exist(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    vectors = clustered(N, rng)
    owners: list[str | None] = ["rare" if i < 3 else ("north" if i % 2 else "south") for i in range(N)]
    chunks = chunks_for(owners)
    edge = build(tmp_path / "edge", chunks, vectors)
    exact = ExactStore(tmp_path / "exact")
    exact.create(DIM)
    exact.upsert(chunks, vectors)
    north, rare = Query(text="", tenant="north"), Query(text="", tenant="rare")
    stranded = StrandedWalk(edge._shard)
    edge.__dict__["_shard"] = stranded
    for q in clustered(5, rng):
        assert [p for p, _ in edge.search(q, 10, north)] == [p for p, _ in exact.search(q, 10, north)]
        assert sorted(p for p, _ in edge.search(q, 10, rare)) == [0, 1, 2]  # all there are: short, and correct
    assert stranded.scans == [False, True] * 10  # each stranded walk, and only it, was scanned again
    edge.__dict__["_shard"] = stranded.shard
    edge.close()
