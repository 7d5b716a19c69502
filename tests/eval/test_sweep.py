"""The sweep as a client of the pipeline: the same numbers and latency definition as `ragopt eval`, a trial's
K measured at its own depth, stage knobs swept from their declarations alone, warm re-runs served from the
workspace, held-out confirmation and an Optuna sample of the grid."""

from __future__ import annotations

from typing import Any

import pytest

from fixtures.tiny_corpus import write_beir

from ragopt.config import ChunkerConfig, RetrievalConfig, StrictModel, knob
from ragopt.data.beir import load_beir
from ragopt.eval.runner import run_queries
from ragopt.eval.scoring import rank_scores
from ragopt.eval.sweep import SweepConfig, confirm, run_sweep
from ragopt.eval.heldout import split_holdout
from ragopt.index import build_index, make_embedder
from ragopt.pipeline import RequestState
from ragopt.plan import StageSpec, register_stage, unregister_stage

CONFIG = SweepConfig(chunk_sizes=["whole", 24], chunk_overlaps=[4], retrievers=["dense", "bm25", "hybrid"], top_k=[1, 3, 10])


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("sweep")
    evalset = load_beir(write_beir(root / "tiny"))
    ws = root / "ws"
    outcome = run_sweep(evalset, CONFIG, ws, progress=False)
    return {"evalset": evalset, "ws": ws, "outcome": outcome, "trials": {t.id: t for t in outcome.results.trials}}


def test_trials_cover_the_search_space(swept: dict[str, Any]) -> None:
    trials = swept["trials"]
    assert len(trials) == 2 * 3 * 3
    assert {"whole_dense_k10", "c24-o4_bm25_k3", "whole_hybrid-rrf_k1"} <= set(trials)
    assert all(t.costs.p50_ms > 0 for t in trials.values())
    # per-stage latencies come from the traces: the stages each retriever runs, and nothing else
    assert {"embed_p95_ms", "vector_p95_ms"} <= set(trials["whole_dense_k10"].costs.model_dump())
    assert "vector_p95_ms" not in trials["whole_bm25_k10"].costs.model_dump()


@pytest.mark.parametrize("trial_id,retriever,k", [("whole_dense_k10", "dense", 10), ("whole_hybrid-rrf_k3", "hybrid", 3),
                                                  ("whole_bm25_k1", "bm25", 1)])
def test_eval_and_sweep_give_identical_metrics_and_the_same_latency_definition(
    swept: dict[str, Any], trial_id: str, retriever: str, k: int
) -> None:
    evalset, ws = swept["evalset"], swept["ws"]
    embedder = make_embedder(ws)
    index = build_index(evalset.documents, ChunkerConfig(mode="whole"), embedder, ws, progress=False).index
    runs = run_queries(evalset, index, embedder, RetrievalConfig(retriever=retriever), k, progress=False)
    trial = swept["trials"][trial_id]
    per_query = rank_scores(runs, evalset, ["ndcg@10", "recall@10"])
    assert trial.per_query["ndcg@10"] == per_query["ndcg@10"]
    assert trial.per_query["recall@10"] == per_query["recall@10"]
    # a query's latency is the sum of its stage spans in both, over the same stages
    assert all(r.ms == pytest.approx(sum(s.ms for s in r.trace.spans)) for r in runs)
    stages = {name.removesuffix("_p95_ms") for name in trial.costs.model_dump() if name.endswith("_p95_ms")}
    assert stages == set(runs[0].stage_ms)


def test_each_k_runs_at_its_own_depth_and_is_the_head_of_a_deeper_run(swept: dict[str, Any], tmp_path: Any) -> None:
    again = run_sweep(swept["evalset"], CONFIG, swept["ws"], progress=False, runs_dir=tmp_path)
    for retriever in ("whole_dense", "whole_bm25", "whole_hybrid-rrf", "c24-o4_hybrid-rrf"):
        deep = _trec(tmp_path / f"{retriever}_k10.trec")
        for k in (1, 3):
            shallow = _trec(tmp_path / f"{retriever}_k{k}.trec")
            assert all(len(docs) <= k for docs in shallow.values())
            for qid, docs in shallow.items():  # chunks of the same document collapse, so compare as a prefix of docs
                assert deep[qid][: len(docs)] == docs, (retriever, k, qid)
    assert {t.id: t.metrics for t in again.results.trials} == {t.id: t.metrics for t in swept["outcome"].results.trials}


def _trec(path: Any) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        qid, _, doc, _, _, _ = line.split()
        out.setdefault(qid, []).append(doc)
    return out


def test_a_warm_rerun_is_served_from_the_workspace_and_remeasure_runs_again(swept: dict[str, Any]) -> None:
    again = run_sweep(swept["evalset"], CONFIG, swept["ws"], progress=False)
    assert {t.id: t.metrics for t in again.results.trials} == {t.id: t.metrics for t in swept["outcome"].results.trials}
    assert all(t.costs.latency_cached for t in again.results.trials)
    assert not any(t.costs.latency_cached for t in swept["outcome"].results.trials)
    fresh = run_sweep(swept["evalset"], CONFIG, swept["ws"], progress=False, remeasure=True)
    assert not any(t.costs.latency_cached for t in fresh.results.trials)
    assert {t.id: t.metrics for t in fresh.results.trials} == {t.id: t.metrics for t in swept["outcome"].results.trials}


def test_each_trials_scores_are_remembered_by_content_and_new_labels_are_scored_anew(swept: dict[str, Any]) -> None:
    from ragopt.cache import workspace_cache
    from ragopt.eval.scoring import SCORES_NAMESPACE

    evalset = swept["evalset"]
    first = evalset.queries[0]
    # the same queries (so the same remembered outcomes) with the first query's judgements moved to other documents
    moved = {d.id: 1 for d in evalset.documents if d.id not in first.relevance}
    relabelled = evalset.model_copy(update={"queries": [first.model_copy(update={"relevance": moved}), *evalset.queries[1:]]})
    again = {t.id: t for t in run_sweep(relabelled, CONFIG, swept["ws"], progress=False).results.trials}
    assert all(t.costs.latency_cached for t in again.values())  # outcomes read back, scores not
    for tid, trial in swept["trials"].items():
        assert again[tid].per_query["ndcg@10"][1:] == trial.per_query["ndcg@10"][1:]
    assert any(again[tid].per_query["ndcg@10"][0] != t.per_query["ndcg@10"][0] for tid, t in swept["trials"].items())
    cache = workspace_cache(swept["ws"])
    # one score set per trial and labelling: the warm re-runs before this one found theirs
    assert cache.evict(SCORES_NAMESPACE) == 2 * len(swept["trials"])
    cache.close()


class ToyConfig(StrictModel):
    drop_first: bool = knob(False, sweep=[False, True])


class DropFirst:
    """A toy stage that lives in this test file alone: it drops the best hit when its knob says so."""

    reads = ("hits",)
    writes = ("hits",)

    def __init__(self, config: ToyConfig) -> None:
        self.name, self.config = "toy", config

    def run(self, state: RequestState) -> RequestState:
        if self.config.drop_first:
            state.hits = [h.model_copy(update={"rank": h.rank - 1}) for h in state.hits[1:]]
        return state


def test_a_stage_defined_in_a_test_file_is_swept_by_its_knob(swept: dict[str, Any], tmp_path: Any) -> None:
    register_stage(StageSpec("toy", ToyConfig, lambda config, ctx: DropFirst(config), slot="rerank"))
    try:
        config = SweepConfig(retrievers=["bm25"], top_k=[3], stages={"toy": {"drop_first": [False, True]}})
        trials = {t.id: t for t in run_sweep(swept["evalset"], config, tmp_path / "ws", progress=False).results.trials}
    finally:
        unregister_stage("toy")
    assert set(trials) == {"whole_bm25_k3_toy-drop_firstoff", "whole_bm25_k3_toy-drop_firston"}
    kept, dropped = trials["whole_bm25_k3_toy-drop_firstoff"], trials["whole_bm25_k3_toy-drop_firston"]
    assert kept.params.model_dump()["toy.drop_first"] is False and dropped.params.model_dump()["toy.drop_first"] is True
    assert dropped.metrics["mrr@10"] < kept.metrics["mrr@10"]  # the best passage was the right one for most queries
    assert "toy_p95_ms" in dropped.costs.model_dump()


def test_an_unknown_knob_or_value_is_an_input_error_before_any_work() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="unknown stage kind 'nope'"):
        SweepConfig(stages={"nope": {"x": [1]}})
    with pytest.raises(ValidationError, match="generate has no setting 'colour'"):
        SweepConfig(stages={"generate": {"colour": ["red"]}})


def test_held_out_confirmation_records_intervals_and_overfitting(swept: dict[str, Any]) -> None:
    selection, held = split_holdout(swept["evalset"], 0.4, seed=1)
    assert {q.query.id for q in selection.queries}.isdisjoint(q.query.id for q in held.queries)
    config = CONFIG.model_copy(update={"retrievers": ["hybrid"], "chunk_sizes": ["whole"], "top_k": [3], "gates": ["recall@3>=0.5"]})
    outcome = run_sweep(selection, config, swept["ws"], progress=False)
    confirm(outcome, held, swept["ws"], split="holdout", selection_split="selection", progress=False)
    h = outcome.results.held_out
    assert h is not None and h.trial == outcome.results.selected and h.n_queries == len(held.queries)
    assert h.intervals["recall@3"].low <= h.intervals["recall@3"].mean <= h.intervals["recall@3"].high
    assert set(h.overfit) >= {"recall@3", "ndcg@10"}
    for name, flagged in h.overfit.items():
        chosen = h.selection_intervals[name]
        assert flagged == (not chosen.low <= h.intervals[name].mean <= chosen.high)


def test_optuna_samples_distinct_trials_reproducibly(swept: dict[str, Any]) -> None:
    pytest.importorskip("optuna")
    config = CONFIG.model_copy(update={"search": "optuna", "max_trials": 5, "seed": 3})
    first = [t.id for t in run_sweep(swept["evalset"], config, swept["ws"], progress=False).results.trials]
    second = [t.id for t in run_sweep(swept["evalset"], config, swept["ws"], progress=False).results.trials]
    assert len(first) == len(set(first)) == 5 and first == second
    grid = {t for t in swept["trials"]}
    assert set(first) <= grid


def test_each_overlap_is_tried_with_each_size_below_it() -> None:
    config = SweepConfig(chunk_sizes=[16, 64, "whole"], chunk_overlaps=[0, 32])
    assert [c.label for c in config.chunker_configs()] == ["16/0", "64/0", "64/32", "whole"]


def test_analyzers_are_a_dimension_of_the_retrievers_that_use_bm25() -> None:
    config = SweepConfig(retrievers=["dense", "bm25", "hybrid"], analyzers=["english", "chinese"], top_k=[5])
    plans = dict(config.plans())
    assert list(plans) == ["whole_dense_k5", "whole_bm25_an-english_k5", "whole_bm25_an-chinese_k5",
                           "whole_hybrid-rrf_an-english_k5", "whole_hybrid-rrf_an-chinese_k5"]
    assert plans["whole_hybrid-rrf_an-chinese_k5"].retrieval.bm25.analyzer == "chinese"
    assert [i for i, _ in SweepConfig(retrievers=["bm25"], top_k=[5]).plans()] == ["whole_bm25_k5"]  # one: no label


def test_an_unknown_analyzer_in_a_sweep_config_names_the_setting(tmp_path: Any) -> None:
    from ragopt.config import load_toml
    from ragopt.errors import InputError

    for body, key in (('analyzers = ["english", "klingon"]\n', "analyzers.1"), ('[bm25]\nanalyzer = "klingon"\n', "bm25.analyzer")):
        path = tmp_path / "sweep.toml"
        path.write_text(body, encoding="utf-8")
        with pytest.raises(InputError) as err:
            load_toml(path, SweepConfig)
        assert err.value.field == key and "'chinese'" in err.value.message


ROUTED = {"generator": ["extractive", "llama"], "route_small_max_words": [0, 5]}


def test_a_knob_its_stage_ignores_makes_no_trial_of_its_own() -> None:
    plans = dict(SweepConfig(retrievers=["bm25"], top_k=[5], stages={"generate": ROUTED}).plans())
    assert list(plans) == ["whole_bm25_k5_generate-generatorextractive_generate-route_small_max_words0",
                           "whole_bm25_k5_generate-generatorllama_generate-route_small_max_words0",
                           "whole_bm25_k5_generate-generatorllama_generate-route_small_max_words5"]  # no routed extractive
    assert [p.routing() for p in plans.values()] == ["small", "default", "routed"]
    nothing = SweepConfig(retrievers=["bm25"], top_k=[5], stages={"generate": {"generator": "none", "max_sentences": [1, 2]}})
    assert len(nothing.plans()) == 1  # no answer, so the answer's knobs change nothing


def test_shares_appear_only_in_a_sweep_with_a_routed_trial() -> None:
    assert SweepConfig(stages={"generate": ROUTED}).routes()
    for quiet in (SweepConfig(answers="extractive"), SweepConfig(stages={"generate": {**ROUTED, "route_small_max_words": 0}}),
                  SweepConfig(stages={"generate": {"generator": "extractive", "route_small_max_words": [0, 5]}})):
        assert not quiet.routes() and "routed_small_share" not in quiet.metric_names(False, True)


def test_a_routed_sweep_reports_quality_beside_each_trials_share_of_small_answers(tiny_gguf: Any, tmp_path: Any) -> None:
    from ragopt.eval.report import csv_rows, write_outputs
    from ragopt.eval.report_terminal import table_lines
    from ragopt.text.routing import Router

    evalset = load_beir(write_beir(tmp_path / "tiny"))
    config = SweepConfig(retrievers=["bm25"], top_k=[3], race="off", stages={"generate": {  # every trial answers everything
        **ROUTED, "model": str(tiny_gguf), "max_tokens": 8}})
    routes: dict[str, list[Any]] = {}
    outcome = run_sweep(evalset, config, tmp_path / "ws", progress=False,
                        on_trial=lambda trial, outcomes: routes.__setitem__(trial.id, [o.route for o in outcomes]))
    knobs = [t.params.model_dump() for t in outcome.results.trials]
    shares = {(k["generate.generator"], k["generate.route_small_max_words"]): t.metrics["routed_small_share"]
              for k, t in zip(knobs, outcome.results.trials)}
    expected = [Router(5).route(q.query.text) for q in evalset.queries]
    assert 0 < expected.count("small") < len(expected)  # the tiny set has both kinds
    assert shares == {("extractive", 0): 1.0, ("llama", 0): 0.0, ("llama", 5): expected.count("small") / len(expected)}
    routed_id = next(t for t in routes if t.endswith("words5"))
    assert routes[routed_id] == expected and all(r is None for t, r in routes.items() if t != routed_id for r in r)
    header, _ = csv_rows(outcome.results)
    assert "routed_small_share" in header and "citation_precision" in header
    write_outputs(outcome.results, tmp_path / "out")
    assert "routed_small_share" in (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert "<th class='n'>routed_small_share</th>" in (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    table = table_lines(outcome.results)
    assert "small share" in table[0] and len(table) >= 4, "\n".join(table)
