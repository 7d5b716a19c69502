"""Store knobs as sweep dimensions (ragopt/eval/space.py, `[store]` lists): one shard per shard shape, searched at
every ef without opening it again, exact search once, the knobs in each trial's params and plan; the selected
plan opens with its own store; a bad swept value is one line naming the key."""

from __future__ import annotations

from pathlib import Path

from fixtures.cli import one_line_error, ragopt

from ragopt.config import StoreConfig
from ragopt.data import load_evalset
from ragopt.eval.space import SweepConfig
from ragopt.eval.sweep import run_sweep
from ragopt.plan import PlanConfig, open_plan
from ragopt.shipped import shipped_dataset

STORES = {"engine": ["exact", "qdrant-edge"], "hnsw_ef": [4, 128], "quantization": ["int8", "none"]}
CONFIG = SweepConfig(chunk_sizes=[128], chunk_overlaps=[16], retrievers=["dense"], top_k=[5],
                     gates=["recall@5>=0.5"], store=STORES)


def test_store_lists_sweep_the_store_with_one_shard_per_shape_and_the_pick_serves_its_own(tmp_path: Path) -> None:
    ids = [tid for tid, _ in CONFIG.plans()]
    assert len(ids) == 5 and sum("store-engineexact" in t for t in ids) == 1  # exact once: HNSW knobs mean nothing there
    evalset = load_evalset(shipped_dataset())
    outcome = run_sweep(evalset, CONFIG, tmp_path / "ws", progress=False)
    trials = {t.id: t for t in outcome.results.trials}
    assert set(trials) == set(ids)
    # exact, and one qdrant-edge shard per quantization: ef is searched on the same shard
    assert len([p for p in (tmp_path / "ws" / "indexes").iterdir() if p.is_dir()]) == 3  # index folders, not their locks
    for t in trials.values():
        engine = t.params.model_dump()["store.engine"]
        assert t.plan["store"]["engine"] == engine and t.costs.model_dump()["vector_p50_ms"] > 0
    exact = next(t for t in trials.values() if "engineexact" in t.id)
    for t in trials.values():  # 909 chunks: every setting finds exact search's hits
        assert abs(t.metrics["recall@5"] - exact.metrics["recall@5"]) < 1e-9
    picked = outcome.results.selected_trial
    _, report = open_plan(PlanConfig.model_validate(picked.plan), evalset.documents, tmp_path / "ws",
                                 store=StoreConfig(engine="exact"), progress=False)  # the plan's store wins
    assert report.reused and report.index.manifest.store == picked.plan["store"]["engine"].replace("exact", "numpy-exact")


def test_a_bad_swept_store_value_is_one_line_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('retrievers = ["dense"]\n[store]\nengine = "qdrant-edge"\nhnsw_ef = [64, 0]\n', encoding="utf-8")
    line = one_line_error(ragopt("sweep", "--config", str(config), workspace=tmp_path / "ws"), "sweep")
    assert "store.hnsw_ef" in line and "got 0" in line
    assert not (tmp_path / "ws").exists()
    config.write_text('retrievers = ["dense"]\n[store]\nengine = "qdrant-edge"\n', encoding="utf-8")
    line = one_line_error(ragopt("sweep", "--config", str(config), "--set", "store.quantization=int8,int4",
                                 workspace=tmp_path / "ws"), "sweep")
    assert "[--set]" in line and "store.quantization" in line and "int4" in line
