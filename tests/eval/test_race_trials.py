"""A raced sweep on the shipped hospital set (BM25, extractive answers: real stages, cheap answers) against the
full grid: the same pick with the grid's own figures, confirmed on every question; a re-run that answers nothing
again; dropped trials marked in every output; the same race, byte for byte, from fresh processes; bad race flags
named before any work."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from fixtures.cli import one_line_error, ragopt

from ragopt.data import load_evalset
from ragopt.eval.report import write_outputs
from ragopt.eval.report_terminal import table_lines
from ragopt.eval.sweep import SweepConfig, run_sweep
from ragopt.shipped import shipped_dataset

GATE = "answer_contains_reference>=0.45"
CONFIG = SweepConfig(chunk_sizes=[128], chunk_overlaps=[16], retrievers=["bm25"], top_k=[1, 2, 3, 5, 10],
                     gates=[GATE], answers="extractive", race="on")


@pytest.fixture(scope="module")
def raced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("race")
    evalset = load_evalset(shipped_dataset())
    race = run_sweep(evalset, CONFIG, root / "ws-race", progress=False)
    grid = run_sweep(evalset, CONFIG.model_copy(update={"race": "off"}), root / "ws-grid", progress=False)
    return {"root": root, "evalset": evalset, "race": race, "grid": grid}


def test_the_race_picks_the_grids_trial_with_the_grids_figures_confirmed_on_every_question(raced: dict[str, Any]) -> None:
    race, grid = raced["race"].results, raced["grid"].results
    assert race.selected == grid.selected is not None
    picked, same = race.selected_trial, grid.selected_trial
    assert picked.race.status == "measured" and picked.race.answered == picked.race.questions == len(race.query_ids)
    answered = picked.per_query["answer_contains_reference"]
    assert sum(v is not None for v in answered) == sum(v is not None for v in same.per_query["answer_contains_reference"])
    for name in ("answer_contains_reference", "citation_precision", "recall@10", "ndcg@10"):
        assert picked.metrics[name] == same.metrics[name], name
    assert race.race.rounds[-1].questions == len(race.query_ids)
    costlier = [t for t in race.trials if t.costs.context_tokens > picked.costs.context_tokens]
    assert costlier and all(t.race.answered == 0 and t.race.reason.startswith(f"costs more than the leader {picked.id}")
                            for t in costlier)  # the leader was confirmed first, cheapest first: they never answer
    assert race.generations.answers < grid.generations.answers == len(grid.trials) * len(grid.query_ids)


def test_a_rerun_reuses_every_answer(raced: dict[str, Any]) -> None:
    again = run_sweep(raced["evalset"], CONFIG, raced["root"] / "ws-race", progress=False).results
    first = raced["race"].results
    assert again.generations.generated == 0 and again.generations.answers == first.generations.answers > 0
    assert again.selected == first.selected
    assert [t.race for t in again.trials] == [t.race for t in first.trials]
    widened = run_sweep(raced["evalset"], CONFIG.model_copy(update={"race": "off"}), raced["root"] / "ws-race",
                        progress=False).results  # the full grid after the race: only the answers the race did not make
    assert widened.generations.generated == raced["grid"].results.generations.generated - first.generations.generated


def test_dropped_trials_are_marked_in_every_output(raced: dict[str, Any], tmp_path: Path) -> None:
    results = raced["race"].results
    dropped = [t for t in results.trials if t.dropped]
    assert dropped and all(t.race.answered < len(results.query_ids) for t in dropped)
    assert any(t.race.answered == 0 for t in dropped)  # costlier than the confirmed leader: never answered
    for t in dropped:  # never shown as measured on every question
        assert t.per_query["answer_contains_reference"].count(None) >= len(results.query_ids) - t.race.answered
        assert ("answer_contains_reference" in t.intervals) == (t.race.answered > 0)
    paths = write_outputs(results, tmp_path, raced["race"].latencies)
    saved = json.loads(paths["json"].read_text())
    assert {t["id"] for t in saved["trials"] if (t["race"] or {}).get("status") == "dropped"} == {t.id for t in dropped}
    with open(paths["csv"], encoding="utf-8") as f:
        rows = {row["id"]: row for row in csv.DictReader(f)}
    for t in dropped:
        assert rows[t.id]["race_status"] == "dropped" and rows[t.id]["passed"] == "False"
        assert rows[t.id]["answered_questions"] == str(t.race.answered) and rows[t.id]["race_reason"]
        assert f"dropped in round {t.race.round}, answer figures on {t.race.answered} of" in paths["summary"].read_text()
        assert f"dropped in round {t.race.round}" in paths["html"].read_text()
    lines = table_lines(results, rows=len(results.trials))
    assert all(any(line.startswith(f"  - {t.id}") for line in lines) for t in dropped)


def test_a_seeded_race_is_byte_identical_across_fresh_processes(tmp_path: Path) -> None:
    config = tmp_path / "race.toml"
    config.write_text(f'dataset = "{shipped_dataset()}"\nchunk_sizes = [128]\nchunk_overlaps = [16]\n'
                      f'retrievers = ["bm25"]\ntop_k = [1, 3, 10]\ngates = ["recall@5>=0.7"]\n'
                      'answers = "extractive"\n', encoding="utf-8")
    races = []
    for run in ("a", "b"):
        done = ragopt("sweep", "--config", str(config), "--race", "--race-schedule", "0.1,0.3,1", "--seed", "3",
                      "--out", str(tmp_path / run), "--no-progress", workspace=tmp_path / f"ws-{run}", timeout=1200)
        assert done.returncode == 0, done.stderr
        saved = json.loads((tmp_path / run / "results.json").read_text())
        races.append(json.dumps({"race": saved["race"], "selected": saved["selected"],
                                 "trials": [(t["id"], t["race"], t["per_query"]) for t in saved["trials"]]}))
    assert races[0] == races[1]
    # K = 1 fails the gate and K = 10 costs more than K = 3, which passes it: both dropped by screening
    assert '"screened_out": ["c128-o16_bm25_k1", "c128-o16_bm25_k10"]' in races[0]
    assert '"round_sizes": [25, 75, 249]' in races[0]


@pytest.mark.parametrize("flags,named", [
    (["--race-schedule", "0.5,0.2,1"], "--race-schedule"),
    (["--race-schedule", "0.1,0.5"], "--race-schedule"),
    (["--race-schedule", "half"], "--race-schedule"),
    (["--race-confidence", "1.5"], "--race-confidence"),
    (["--race-confidence", "0"], "--race-confidence"),
    (["--race", "--top-k", "5", "--retrievers", "bm25", "--chunk-sizes", "64"], "--race"),
])
def test_bad_race_flags_are_one_line_naming_the_flag_before_any_work(flags: list[str], named: str, tmp_path: Path) -> None:
    done = ragopt("sweep", *flags, "--out", str(tmp_path / "out"), workspace=tmp_path / "ws")
    assert f"[{named}]" in one_line_error(done, "sweep")
    assert not (tmp_path / "out").exists() and not (tmp_path / "ws").exists()


def test_trials_screening_drops_carry_the_answer_metrics_they_never_measured(raced: dict[str, Any]) -> None:
    config = CONFIG.model_copy(update={"top_k": [1, 3, 10], "gates": ["recall@5>=0.7", GATE]})
    results = run_sweep(raced["evalset"], config, raced["root"] / "ws-race", progress=False).results
    screened = {t.id: t for t in results.trials if t.dropped and t.race.round == 0}
    assert "c128-o16_bm25_k1" in screened  # fails recall@5 on every question: never answered
    assert all(t.metrics["answer_contains_reference"] is None and t.race.answered == 0 for t in screened.values())
    assert results.selected not in screened and results.selected_trial.race.status == "measured"
