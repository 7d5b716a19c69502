import json
import math

import pytest

from ragopt.errors import InputError
from ragopt.eval.results import SCHEMA_VERSION, SweepResults, Trial, TrialParams
from synthetic_results import make_results


def test_roundtrip(tmp_path):
    r = make_results(n_queries=10)
    path = r.save(tmp_path / "results.json")
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert set(data) >= {"dataset", "created_at", "versions", "models", "search_space", "objective", "gates",
                         "trials", "selected", "verdicts", "query_ids"}
    t = data["trials"][0]
    assert set(t) == {"id", "params", "metrics", "costs", "per_query", "intervals", "unsupported", "plan", "models", "race"}
    assert set(t["costs"]) >= {"p50_ms", "p95_ms", "p99_ms", "context_tokens", "index_build_s", "index_bytes",
                               "n_chunks"}
    back = SweepResults.load(path)
    assert back == r
    assert back.selected_trial.id == r.selected


def test_extra_knobs_and_nan():
    t = Trial(
        id="x",
        params=TrialParams(chunker="whole", retriever="dense", top_k=5, rerank_depth=20),
        metrics={"span_recall@10": math.nan},
        per_query={"span_recall@10": [0.5, math.nan]},
    )
    assert t.params.model_dump()["rerank_depth"] == 20
    assert t.metrics["span_recall@10"] is None and t.per_query["span_recall@10"] == [0.5, None]
    assert "NaN" not in t.model_dump_json()


def test_consistency_checks():
    r = make_results(n_queries=5)
    data = json.loads(r.to_json())
    bad = dict(data, selected="nope")
    with pytest.raises(ValueError, match="selected"):
        SweepResults.model_validate(bad)
    bad = dict(data, query_ids=data["query_ids"][:-1])
    with pytest.raises(ValueError, match="per_query"):
        SweepResults.model_validate(bad)
    bad = dict(data, trials=data["trials"] + data["trials"][:1])
    with pytest.raises(ValueError, match="duplicate"):
        SweepResults.model_validate(bad)


def test_load_errors(tmp_path):
    with pytest.raises(InputError, match="not found"):
        SweepResults.load(tmp_path / "missing.json")
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(InputError, match="JSON"):
        SweepResults.load(p)
    p.write_text(json.dumps({"schema_version": 2}))
    with pytest.raises(InputError) as e:
        SweepResults.load(p)
    assert e.value.field == "schema_version"
    data = json.loads(make_results(n_queries=3).to_json())
    data["trials"][0]["params"]["top_k"] = "many"
    p.write_text(json.dumps(data))
    with pytest.raises(InputError) as e:
        SweepResults.load(p)
    assert e.value.field == "trials.0.params.top_k"
