from ragopt.eval.report_common import beats_floor, floor_pairs, stage_latency_columns, swept_params, with_floor
from ragopt.eval.results import Costs, Trial, TrialParams


def _trial(tid: str, stages: dict[str, float], **params) -> Trial:
    costs = {f"{s}_{p}_ms": ms * (1 if p == "p50" else 2) for s, ms in stages.items() for p in ("p50", "p95")}
    return Trial(id=tid, params=TrialParams(chunker="whole", retriever="hybrid", top_k=10, **params),
                 costs=Costs(p50_ms=10.0, p95_ms=20.0, **costs))


PIPELINE = {"embed": 30.0, "vector": 0.2, "bm25": 0.1, "fuse": 0.05}


def test_a_stage_missing_from_some_trials_gets_columns():
    trials = [
        _trial("d0", PIPELINE, **{"rerank_maxsim.depth": 0}),
        _trial("d20", {**PIPELINE, "rerank_maxsim": 80.0, "keep_top": 0.01}, **{"rerank_maxsim.depth": 20}),
    ]
    # rerank_maxsim: missing where depth is 0 (and its knob is swept); keep_top: missing where depth is 0
    assert stage_latency_columns(trials) == ["rerank_maxsim", "keep_top"]
    assert stage_latency_columns(trials[1:]) == []  # one trial: nothing differs


def test_a_swept_setting_names_its_stage():
    base = {**PIPELINE, "rerank": 100.0}
    same = [_trial(f"t{i}", base, **{"rerank.depth": 20, "embedder": "minilm"}) for i in range(2)]
    assert swept_params(same) == [] and stage_latency_columns(same) == []
    depths = [_trial(f"t{d}", base, **{"rerank.depth": d, "embedder": "minilm"}) for d in (20, 50)]
    assert swept_params(depths) == ["rerank.depth"] and stage_latency_columns(depths) == ["rerank"]
    embedders = [_trial(f"t{e}", base, **{"rerank.depth": 20, "embedder": e}) for e in ("minilm", "tuned")]
    assert stage_latency_columns(embedders) == ["embed"]  # embedder -> the embed stage; vector is not named


def test_floor_pairs_and_whether_precision_beats_its_floor():
    t = Trial(id="a", params=TrialParams(chunker="whole", retriever="bm25", top_k=5), metrics={
        "citation_precision": 0.5, "citation_recall": 0.4, "citation_span_precision": 0.3,
        "citation_floor_precision": 0.5, "citation_floor_span_precision": 0.1})
    assert floor_pairs([t]) == [("citation_precision", "citation_floor_precision"),
                                         ("citation_span_precision", "citation_floor_span_precision")]
    assert beats_floor(t, "citation_precision", "citation_floor_precision") is False  # equal is not above
    assert beats_floor(t, "citation_span_precision", "citation_floor_span_precision") is True
    assert with_floor(t, "citation_span_precision", "citation_floor_span_precision") == "0.300 (floor 0.100)"
    unscored = t.model_copy(update={"metrics": {"citation_precision": None, "citation_floor_precision": 0.5}})
    assert floor_pairs([unscored]) == [] and beats_floor(unscored, "citation_precision", "citation_floor_precision") is None
    assert with_floor(unscored, "citation_precision", "citation_floor_precision") == ""
