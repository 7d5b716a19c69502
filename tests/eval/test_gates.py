import pytest

from ragopt.errors import InputError
from ragopt.eval.gates import (
    OBJECTIVE,
    Gate,
    check_known,
    evaluate_gates,
    objective_for,
    quality_metric,
    rank_trials,
    select,
)
from ragopt.eval.results import Costs, Trial, TrialParams


def trial(tid, recall, ndcg, tokens, p95, top_k=10):
    return Trial(
        id=tid,
        params=TrialParams(chunker="256/32", chunk_size=256, chunk_overlap=32, retriever="hybrid", top_k=top_k),
        metrics={"recall@10": recall, "ndcg@10": ndcg},
        costs=Costs(context_tokens=tokens, p95_ms=p95, p50_ms=p95 / 2),
    )


def test_parse_forms():
    g = Gate.parse(" Recall@10 >= 0.9 ")
    assert (g.metric, g.op, g.threshold, g.expr) == ("recall@10", ">=", 0.9, "recall@10>=0.9")
    assert Gate.parse("p95_ms<=50").threshold == 50
    assert Gate.parse("context_tokens<1.5e3").threshold == 1500
    assert Gate.parse("ndcg@10>.6").op == ">"


@pytest.mark.parametrize("bad", ["recall@10=>0.9", "recall@10==0.9", "recall@10>=", ">=0.9", "recall@10>=abc",
                                 "recall@10 >= 0.9 extra", "", "recall@10>=nan"])
def test_bad_expressions(bad):
    with pytest.raises(InputError) as e:
        Gate.parse(bad)
    assert e.value.field == "gate" and repr(bad) in str(e.value)


def test_verdict_messages():
    t = trial("a", recall=0.842, ndcg=0.7, tokens=1543.2, p95=62.13)
    short, ok, over, tok = evaluate_gates(t, ["recall@10>=0.9", "ndcg@10>=0.6", "p95_ms<=50", "context_tokens<=1500"])
    assert not short.passed and short.observed == 0.842 and short.threshold == 0.9
    assert short.margin == pytest.approx(-0.058)
    assert short.message == "recall@10 = 0.842, needs >= 0.9, short by 0.058"
    assert ok.passed and ok.message == "ndcg@10 = 0.7, needs >= 0.6, passes by 0.1"
    assert over.message == "p95_ms = 62.13, needs <= 50, over by 12.13"
    assert tok.message == "context_tokens = 1,543.2, needs <= 1,500, over by 43.2"
    eq = evaluate_gates(trial("b", 0.9, 0.7, 10, 1), ["recall@10>0.9", "recall@10>=0.9"])
    assert not eq[0].passed and "equal to the threshold" in eq[0].message
    assert eq[1].passed and eq[1].margin == 0


def test_unknown_metric_lists_known_names():
    with pytest.raises(InputError) as e:
        evaluate_gates(trial("a", 0.9, 0.7, 10, 1), ["recal@10>=0.9"])
    msg = str(e.value)
    assert "recal@10" in msg and "recall@10" in msg and "p95_ms" in msg and e.value.field == "gate"
    with pytest.raises(InputError):
        check_known(["mrr@10>=0.5"], ["recall@10", "p95_ms"])
    assert check_known(["p95_ms<=5"], ["recall@10", "p95_ms"])[0].metric == "p95_ms"


def test_unmeasured_fails():
    t = Trial(id="x", params=TrialParams(chunker="whole", retriever="bm25", top_k=5), metrics={"recall@10": None})
    v, lat = evaluate_gates(t, ["recall@10>=0.5", "p95_ms<=10"])
    assert not v.passed and "not measured" in v.message and not lat.passed


def test_select_cheapest_passing_and_reasons():
    trials = [
        trial("big", 0.98, 0.80, 3000, 20, top_k=20),
        trial("mid", 0.93, 0.75, 1400, 30),
        trial("mid_fast", 0.91, 0.70, 1400, 12),  # same tokens, faster: wins
        trial("small", 0.80, 0.72, 300, 5, top_k=3),  # cheapest but misses recall
    ]
    gates = ["recall@10>=0.9", "context_tokens<=2000"]
    best, reasons = select(trials, gates)
    assert best.id == "mid_fast"
    assert set(reasons) == {"big", "small"}
    assert reasons["small"] == ["recall@10 = 0.8, needs >= 0.9, short by 0.1"]
    assert reasons["big"] == ["context_tokens = 3,000, needs <= 2,000, over by 1,000"]
    assert [t.id for t in rank_trials(trials, gates)] == ["mid_fast", "mid", "small", "big"]

    # quality breaks the last tie
    tie = [trial("a", 0.95, 0.70, 100, 5), trial("b", 0.92, 0.75, 100, 5)]
    assert select(tie, ["recall@10>=0.9"])[0].id == "a"  # quality = recall@10, the first quality gate
    assert select(tie, ["p95_ms<=10"])[0].id == "b"  # no quality gate: ndcg@10

    none, reasons = select(trials, ["recall@10>=0.99"])
    assert none is None and len(reasons) == 4


def test_objective_strings():
    assert "context_tokens" in OBJECTIVE and "p95_ms" in OBJECTIVE
    assert quality_metric(["p95_ms<=50", "ndcg@10>=0.6"]) == "ndcg@10"
    assert quality_metric(["p95_ms<=50"]) == "ndcg@10"
    assert quality_metric(["mrr@10>=0.5", "recall@10>=0.9"]) == "mrr@10"
    assert objective_for(["recall@10>=0.9"]).endswith("then highest recall@10; ties by trial id")
