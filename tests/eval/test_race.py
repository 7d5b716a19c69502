"""Racing trials on questions (ragopt.eval.race): who is dropped and who is kept, on figures built by hand; the
schedule; intervals that have width when every score is equal, tests corrected for the rounds and gates a trial
meets, and the simulated chance of dropping a trial that passes; and bad race settings named before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.scripts import load_script

from ragopt.errors import InputError
from ragopt.eval.gates import parse_gates
from ragopt.eval.heldout import mean_interval, min_half_width
from ragopt.eval.race import (DROPPED, RACING, RaceContext, Standing, answer_gates, decide, per_test_confidence,
                              question_order, race_lines, round_sizes)
from ragopt.eval.results import Costs, Generations, RaceSummary, Trial, TrialParams
from ragopt.eval.space import SweepConfig
from ragopt.plan import PlanConfig

N = 200  # questions in the set


def _standing(tid: str, tokens: float, recall: float, answers: list[float] | None) -> Standing:
    """A trial screened on every question (recall@5, context tokens) that answered `answers` so far."""
    screen = Trial(id=tid, params=TrialParams(chunker="whole", retriever="bm25", top_k=5),
                   metrics={"recall@5": recall}, costs=Costs(context_tokens=tokens), per_query={"recall@5": [recall] * N})
    s = Standing(tid, PlanConfig(), screen, [], None)
    if answers is not None:
        s.scored = screen.model_copy(update={"per_query": {"answer_contains_reference": answers}})
        s.scored_ids = [f"q{i}" for i in range(len(answers))]
    return s


def _ctx(*gates: str) -> RaceContext:
    return RaceContext(gates=parse_gates(gates), n_questions=N, confidence=0.95, seed=0)


def _shares(hits: int, n: int) -> list[float]:
    return [1.0] * hits + [0.0] * (n - hits)


def test_a_trial_worse_beyond_noise_is_dropped_and_one_within_noise_is_kept() -> None:
    ctx = _ctx("answer_contains_reference>=0.5")
    worse = _standing("worse", 100, 0.9, _shares(5, 40))  # 0.125 on 40 questions: its interval lies below 0.5
    close = _standing("close", 100, 0.9, _shares(18, 40))  # 0.45: its interval straddles 0.5
    dropped = decide([worse, close], ctx, 1)
    assert [s.tid for s in dropped] == ["worse"]
    assert worse.status == DROPPED and worse.round == 1
    assert "fails a gate" in worse.reason and "beyond noise" in worse.reason and "on 40 questions" in worse.reason
    assert close.status == RACING and close.reason is None


def test_a_trial_costlier_than_a_leader_passing_beyond_noise_is_dropped_and_a_cheaper_open_one_races_on() -> None:
    ctx = _ctx("answer_contains_reference>=0.5")
    leader = _standing("leader", 300, 0.9, _shares(36, 40))  # 0.9: passes beyond noise
    costlier = _standing("costlier", 400, 0.9, _shares(40, 40))
    cheaper = _standing("cheaper", 200, 0.9, _shares(20, 40))  # 0.5: undecided, and cheaper than the leader
    tie = _standing("tie", 300, 0.9, _shares(21, 40))  # as cheap as the leader: the final round decides
    decide([leader, costlier, cheaper, tie], ctx, 2)
    assert costlier.status == DROPPED and "costs more than the leader leader (400 vs 300" in costlier.reason
    assert (leader.status, cheaper.status, tie.status) == (RACING, RACING, RACING)


def test_a_leader_whose_gate_is_within_noise_drops_no_one() -> None:
    ctx = _ctx("answer_contains_reference>=0.5")
    noisy_leader = _standing("a", 100, 0.9, _shares(22, 40))  # 0.55: within noise of 0.5
    costlier = _standing("b", 200, 0.9, _shares(40, 40))
    assert decide([noisy_leader, costlier], ctx, 1) == []


def test_screening_decides_retrieval_gates_on_every_question_as_the_grid_does() -> None:
    ctx = _ctx("recall@5>=0.9")  # measured on all questions: no noise between this and the grid's own verdict
    failing = _standing("failing", 100, 0.899, None)
    cheapest_passing = _standing("cheap", 200, 0.9, None)
    costlier = _standing("costly", 300, 0.95, None)
    dropped = decide([failing, cheapest_passing, costlier], ctx, 0)
    assert {s.tid for s in dropped} == {"failing", "costly"}
    assert f"on all {N} questions" in failing.reason and cheapest_passing.status == RACING


def test_round_sizes_follow_the_schedule_with_a_floor_and_end_at_every_question() -> None:
    assert round_sizes(249, [0.1, 0.25, 0.5, 1.0], 20) == [25, 63, 125, 249]
    assert round_sizes(40, [0.1, 0.25, 0.5, 1.0], 20) == [20, 40]  # 4 and 10 lifted to 20, 20 again left out
    assert round_sizes(10, [0.5, 1.0], 20) == [10]
    order = question_order(249, 7)
    assert sorted(order) == list(range(249)) and order == question_order(249, 7) and order != question_order(249, 8)


@pytest.mark.parametrize("values,field", [({"race_schedule": [0.5, 0.25, 1.0]}, "race_schedule"),
                                          ({"race_schedule": [0.1, 0.5]}, "race_schedule"),
                                          ({"race_schedule": [0.0, 1.0]}, "race_schedule"),
                                          ({"race_confidence": 1.0}, "race_confidence"),
                                          ({"race_confidence": 0}, "race_confidence"),
                                          ({"race_min_questions": 0}, "race_min_questions")])
def test_impossible_race_settings_are_refused(values: dict, field: str) -> None:
    from ragopt.config import validate

    with pytest.raises(InputError) as exc:
        validate(SweepConfig, values, "sweep.toml")
    assert exc.value.field == field


def test_racing_with_nothing_to_race_is_refused_and_auto_races_llm_answers_only() -> None:
    with pytest.raises(InputError, match="no trial answers"):
        SweepConfig(race="on", top_k=[1, 3]).races(SweepConfig(top_k=[1, 3]).plans())
    one = SweepConfig(race="on", retrievers=["bm25"], top_k=[3], answers="extractive")
    with pytest.raises(InputError, match="one trial"):
        one.races(one.plans())
    extractive = SweepConfig(retrievers=["bm25"], top_k=[1, 3], answers="extractive")
    assert not extractive.races(extractive.plans())
    llm = SweepConfig(retrievers=["bm25"], top_k=[1, 3], stages={"generate": {"generator": "llama"}})
    assert llm.races(llm.plans())
    assert not llm.model_copy(update={"race": "off"}).races(llm.plans())


def test_an_interval_of_equal_scores_has_width_and_twenty_zeros_do_not_drop_a_trial_in_round_one() -> None:
    zeros = mean_interval([0.0] * 20, 0.95)
    assert zeros.mean == zeros.low == 0.0 and zeros.high == pytest.approx(1.96**2 / (20 + 1.96**2), abs=1e-3)  # Wilson
    ones = mean_interval([1.0] * 20, 0.95)
    assert ones.high == 1.0 and ones.low == pytest.approx(1 - zeros.high)
    halves = mean_interval([0.5] * 20, 0.95, seed=3)  # not 0/1: the bootstrap, widened to the least it can know
    assert halves.low == pytest.approx(0.5 - min_half_width(20, 0.95)) and halves.high == pytest.approx(1 - halves.low)
    assert mean_interval([0.0] * 200, 0.95).high < zeros.high  # and narrows as the questions grow
    for n in range(1, 300):  # it holds the share itself at any n: rounding put an all-ones top at 1 - 1e-16 (n=138),
        assert mean_interval([1.0] * n, 0.95).high == 1.0  # and a held-out 1.0 was flagged OVERFIT against it
        assert mean_interval([0.0] * n, 0.95).low == 0.0
    ctx = _ctx("answer_contains_reference>=0.15")
    s = _standing("zeros", 100, 0.9, _shares(0, 20))
    assert decide([s], ctx, 1) == [] and s.status == RACING  # 0 of 20 is within noise of 0.15 (before: [0, 0], dropped)
    assert decide([_standing("worse", 100, 0.9, _shares(0, 40))], ctx, 2)  # 0 of 40 lies below it


def test_each_test_of_a_trial_is_made_at_the_confidence_its_rounds_and_gates_leave() -> None:
    assert per_test_confidence(0.95, 1) == pytest.approx(0.95) and per_test_confidence(0.95, 6) == pytest.approx(1 - 0.05 / 6)
    gates = parse_gates(["recall@5>=0.8", "answer_contains_reference>=0.15", "citation_precision>=0.5", "p95_ms<=900"])
    assert [g.metric for g in answer_gates(gates, ["recall@5", "answer_contains_reference", "citation_precision"])] == [
        "answer_contains_reference", "citation_precision"]  # retrieval and latency gates are not tested round by round
    ctx = _ctx("answer_contains_reference>=0.5")
    ctx.tests = 6
    s = _standing("edge", 100, 0.9, _shares(13, 40))  # 0.325 on 40: below 0.5 at 95%, within noise at 1 - 0.05/6
    assert mean_interval(s.scored.per_query["answer_contains_reference"], 0.95).high < 0.5
    assert decide([s], ctx, 1) == [] and s.status == RACING
    ctx.tests = 1
    assert decide([s], ctx, 1) == [s]


def test_the_simulated_drop_chance_of_a_passing_trial_is_within_the_promise() -> None:
    sim = load_script(Path(__file__).resolve().parents[2] / "scripts" / "race_drop_chance.py")
    case = sim.simulate(100, 0.15, 0.2, 4000, SweepConfig(), seed=0)  # the case: 20 answers in round 1, rate 0.2
    assert case["drop_share"] <= 1 - SweepConfig().race_confidence and case["drop_share"] < case["drop_share_before"]


def test_an_optuna_race_counts_its_answers_against_the_sampled_trials() -> None:
    summary = RaceSummary(confidence=0.95, tests=2, per_test_confidence=0.975, schedule=[0.5, 1.0], min_questions=20,
                          seed=0, round_sizes=[20, 40], grid_answers=160, generations=Generations(answers=40))
    assert "answers: 40 of the full grid's 160 (25.0%)" in "\n".join(race_lines(summary))
    sampled = "\n".join(race_lines(summary.model_copy(update={"sampled": True})))
    assert "answers: 40 of the sampled trials' 160 (25.0%)" in sampled and "2 tests a trial, each at 0.975" in sampled
