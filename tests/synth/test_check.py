"""The rank-agreement figures: Kendall tau over configurations, the generated set's choice and its regret
with a paired bootstrap interval; and `ragopt synth --check-against` end to end on a tiny labelled set."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from fixtures.cli import one_line_error, ragopt
from fixtures.tiny_corpus import write_beir
from ragopt.errors import InputError
from ragopt.synth.check import METRIC, agreement, split_half_tau


def _results(per_query: dict[str, list[float]]) -> SimpleNamespace:
    return SimpleNamespace(trials=[SimpleNamespace(id=i, metrics={"ndcg@10": sum(v) / len(v)}, per_query={"ndcg@10": v})
                                   for i, v in per_query.items()])


LABELLED = {"a": [1.0, 0.9, 0.8, 1.0], "b": [0.5, 0.6, 0.4, 0.5], "c": [0.2, 0.1, 0.3, 0.2]}


def test_the_same_order_is_tau_one_and_no_regret() -> None:
    generated = {"a": [0.7] * 4, "b": [0.6] * 4, "c": [0.1] * 4}
    out = agreement(_results(LABELLED), _results(generated))
    assert out["kendall_tau"] == 1.0 and out["selected"] == out["labelled_best"] == "a"
    assert out["regret"] == 0.0 and out["regret_interval"] == [0.0, 0.0]


def test_a_reversed_order_is_tau_minus_one_and_the_regret_of_the_worst() -> None:
    generated = {"a": [0.1] * 4, "b": [0.5] * 4, "c": [0.9] * 4}
    out = agreement(_results(LABELLED), _results(generated))
    assert out["kendall_tau"] == -1.0 and out["selected"] == "c"
    assert abs(out["regret"] - (0.925 - 0.2)) < 1e-9
    low, high = out["regret_interval"]
    assert 0 < low <= out["regret"] <= high  # clearly worse: the interval leaves 0 out


def test_ties_in_the_generated_scores_are_broken_by_id() -> None:
    generated = {"a": [0.5] * 4, "b": [0.5] * 4, "c": [0.5] * 4}
    assert agreement(_results(LABELLED), _results(generated))["selected"] == "a"


def test_synth_check_against_a_labelled_set(tmp_path: Path) -> None:
    labelled = write_beir(tmp_path / "tiny")
    done = ragopt("synth", "--docs", str(labelled / "corpus.jsonl"), "--out", str(tmp_path / "set"), "--questions", "8",
                  "--round-trip", "off", "--check-against", str(labelled), "--json", workspace=tmp_path / "ws")
    assert done.returncode == 0, done.stderr
    check = json.loads(done.stdout)["check"]
    assert set(check["labelled_ndcg"]) == {"whole_dense_k10", "whole_bm25_k10", "whole_hybrid-rrf_k10", "whole_hybrid-convex0.3_k10",
                                          "whole_hybrid-convex0.7_k10"}
    assert (check["kendall_tau"] is None or -1 <= check["kendall_tau"] <= 1) and check["regret"] >= 0
    other = write_beir(tmp_path / "other", docs=[{"_id": "x1", "title": "", "text": "Another corpus entirely."}],
                       queries=[{"_id": "q", "text": "corpus"}], qrels=[("q", "x1", 1)])
    refused = ragopt("synth", "--docs", str(labelled / "corpus.jsonl"), "--out", str(tmp_path / "set2"), "--round-trip", "off",
                     "--check-against", str(other), workspace=tmp_path / "ws")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr and not (tmp_path / "set2").exists()
    assert refused.stderr.splitlines()[-1].startswith(f"ragopt synth: error: {other} [--check-against]: the labelled and "
                                                      "generated sets must share one corpus")  # after the documents line
    line = one_line_error(ragopt("synth", "--docs", str(labelled / "corpus.jsonl"), "--out", str(tmp_path / "set3"),
                                 "--check-against", str(tmp_path / "missing"), workspace=tmp_path / "ws"), "synth")
    assert "missing" in line  # a labelled set that cannot be read: refused before the documents are



def test_sweeps_over_different_grids_are_an_input_error_naming_the_flag() -> None:
    def sweep(*ids: str) -> SimpleNamespace:
        return SimpleNamespace(trials=[SimpleNamespace(id=i, metrics={METRIC: 0.5}, per_query={METRIC: [0.5]}) for i in ids])

    with pytest.raises(InputError, match="different grids") as err:
        agreement(sweep("a", "b"), sweep("a", "c"))
    assert err.value.field == "--check-against"


def test_split_halves_of_consistent_labelled_queries_agree_and_of_noise_do_not() -> None:
    import random

    rng = random.Random(0)
    steady = {c: [base + rng.uniform(-0.01, 0.01) for _ in range(40)] for c, base in zip("abcde", (0.9, 0.7, 0.5, 0.3, 0.1))}
    assert split_half_tau(steady) == {"median": 1.0, "p10": 1.0, "p90": 1.0}
    for scores in steady.values():
        scores[0] = None  # a query without a figure leaves its half's mean to the others
    assert split_half_tau(steady) == {"median": 1.0, "p10": 1.0, "p90": 1.0}
    noise = {c: [rng.random() for _ in range(40)] for c in "abcde"}
    half = split_half_tau(noise)
    assert half is not None and half["median"] < 0.3  # halves of noise rank the configurations apart
    assert split_half_tau({"a": [1.0, 0.0, 1.0], "b": [0.0, 1.0, 0.0]}) is None  # too few queries to split
