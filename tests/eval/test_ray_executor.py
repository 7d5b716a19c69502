"""The Ray executor on a local Ray instance: the same grid gives the same trials, in the same order, with the
same metrics, rankings and selection as the local executor (latencies differ and are not compared), each in
its own workspace, and counting the same generations; Optuna's TPE drives Ray tasks reproducibly; a session the
caller opened is left open; a worker running other ragopt code stops the sweep with one line. Skips where ray is not installed, which in CI
(RAGOPT_REQUIRE_ALL=1) fails instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fixtures.tiny_corpus import write_beir

ray = pytest.importorskip("ray")

from ragopt.data.beir import load_beir  # noqa: E402
from ragopt.errors import InputError  # noqa: E402
from ragopt.eval.ray_executor import grid_tasks, ray_session  # noqa: E402
from ragopt.eval.sweep import SweepConfig, run_sweep  # noqa: E402

# 2 chunkers x 2 retrievers x 2 K = 8 trials. The selection is the passing trial with the fewest context
# tokens, then the lowest p95: these 8 trials' context tokens all differ, so latency never decides it.
GRID = SweepConfig(chunk_sizes=["whole", 12], chunk_overlaps=[4], retrievers=["bm25", "hybrid"], top_k=[3, 10],
                   gates=["recall@3>=0.8"])


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("ray-sweep")
    evalset = load_beir(write_beir(root / "tiny"))
    local = run_sweep(evalset, GRID, root / "ws-local", progress=False, runs_dir=root / "runs-local")
    assert not ray.is_initialized()
    on_ray = run_sweep(evalset, GRID.model_copy(update={"executor": "ray"}), root / "ws-ray", progress=False,
                       runs_dir=root / "runs-ray")
    still_up = ray.is_initialized()
    return {"root": root, "evalset": evalset, "local": local, "ray": on_ray, "ray_left_running": still_up}


def test_ray_gives_the_local_executors_trials_metrics_and_selection(both: dict[str, Any]) -> None:
    local, on_ray = both["local"].results, both["ray"].results
    assert [t.id for t in on_ray.trials] == [t.id for t in local.trials] and len(local.trials) == 8
    for a, b in zip(local.trials, on_ray.trials):
        assert b.metrics == a.metrics, a.id
        assert b.per_query == a.per_query, a.id
        assert b.params == a.params, a.id
        assert (b.costs.context_tokens, b.costs.n_chunks) == (a.costs.context_tokens, a.costs.n_chunks), a.id
        assert b.costs.p50_ms > 0 and len(both["ray"].latencies[b.id]) == len(both["evalset"].queries)
    assert len({t.costs.context_tokens for t in local.trials}) == 8  # no tie left to latency
    assert local.selected is not None and on_ray.selected == local.selected
    assert on_ray.verdicts == local.verdicts
    assert on_ray.search_space == local.search_space  # the executor is not part of the search space
    assert set(both["ray"].plans) == set(both["local"].plans)


def test_run_files_are_identical_and_the_started_instance_is_shut_down(both: dict[str, Any]) -> None:
    local, on_ray = both["root"] / "runs-local", both["root"] / "runs-ray"
    names = sorted(p.name for p in local.iterdir())
    assert len(names) == 8 and names == sorted(p.name for p in on_ray.iterdir())
    for name in names:
        assert (on_ray / name).read_text() == (local / name).read_text(), name
    assert not both["ray_left_running"]


def test_grid_tasks_keep_plan_order_and_a_group_together_unless_cpus_are_idle() -> None:
    plans = GRID.plans()
    assert [len(t) for t in grid_tasks(plans, 2)] == [4, 4]  # one task per chunker
    assert [len(t) for t in grid_tasks(plans, 4)] == [2, 2, 2, 2]
    assert [len(t) for t in grid_tasks(plans, 1)] == [4, 4]
    for cpus in (1, 2, 3, 8, 64):
        tasks = grid_tasks(plans, cpus)
        assert [p for t in tasks for p in t] == plans
        assert all(len({p.chunker.label for _, p in t}) == 1 for t in tasks)


@pytest.fixture(scope="module")
def session(both: dict[str, Any]) -> Any:
    """A Ray session opened by the caller (after `both`, whose sweep starts and stops its own instance)."""
    with ray_session(None, num_cpus=2):
        yield ray
    assert not ray.is_initialized()


def test_optuna_on_ray_samples_distinct_grid_trials_reproducibly(both: dict[str, Any], session: Any) -> None:
    pytest.importorskip("optuna")
    config = GRID.model_copy(update={"executor": "ray", "search": "optuna", "max_trials": 4, "seed": 3})
    ws = both["root"] / "ws-optuna"
    first = run_sweep(both["evalset"], config, ws, progress=False).results
    assert ray.is_initialized()  # the caller's session is left open
    second = run_sweep(both["evalset"], config, ws, progress=False).results
    ids = [t.id for t in first.trials]
    assert len(ids) == len(set(ids)) == 4 and ids == [t.id for t in second.trials]
    grid = {t.id: t for t in both["local"].results.trials}
    for trial in first.trials:
        assert trial.metrics == grid[trial.id].metrics, trial.id


def test_a_grid_on_ray_counts_its_generations_as_the_local_grid(both: dict[str, Any], session: Any) -> None:
    # two chunkers on the session's 2 CPUs: one task per chunker, so each task's stage memo shares what the local
    # run's does (answers of the same passages), and the generator calls are the same too
    answering = GRID.model_copy(update={"answers": "extractive", "retrievers": ["bm25"]})
    assert [len(t) for t in grid_tasks(answering.plans(), 2)] == [2, 2]
    local = run_sweep(both["evalset"], answering, both["root"] / "ws-answers-local", progress=False).results
    on_ray = run_sweep(both["evalset"], answering.model_copy(update={"executor": "ray"}),
                       both["root"] / "ws-answers-ray", progress=False).results
    assert local.race is None and local.generations.answers == len(local.trials) * len(local.query_ids) > 0
    assert local.generations.generated > 0
    assert on_ray.generations.model_dump() == local.generations.model_dump()


def test_a_worker_with_other_ragopt_code_stops_the_sweep_in_one_line(
    both: dict[str, Any], session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ragopt.eval.executor

    monkeypatch.setattr(ragopt.eval.executor, "code_fingerprint", lambda: "a-driver-of-other-code")
    config = GRID.model_copy(update={"executor": "ray", "chunk_sizes": ["whole"], "top_k": [3]})
    with pytest.raises(InputError, match="other ragopt code") as caught:
        run_sweep(both["evalset"], config, both["root"] / "ws-other-code", progress=False)
    assert "\n" not in str(caught.value) and "install the same ragopt on every node" in str(caught.value)
    assert ray.is_initialized()


def test_a_race_on_ray_drops_and_picks_as_the_local_race(both: dict[str, Any]) -> None:
    race = GRID.model_copy(update={"answers": "extractive", "race": "on", "gates": ["recall@3>=0.8", "citation_valid_share>=0.5"]})
    local = run_sweep(both["evalset"], race, both["root"] / "ws-race-local", progress=False).results
    on_ray = run_sweep(both["evalset"], race.model_copy(update={"executor": "ray"}), both["root"] / "ws-race-ray",
                       progress=False).results
    assert on_ray.selected == local.selected and [t.race for t in on_ray.trials] == [t.race for t in local.trials]
    assert [t.metrics for t in on_ray.trials] == [t.metrics for t in local.trials]
    assert on_ray.race.generations.answers == local.race.generations.answers > 0
