"""Judged metrics inside a sweep: faithfulness with intervals and the unsupported sentences per trial, judge costs in
the results, an unchanged re-run that makes no judge call, and a call budget refused before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.tiny_corpus import write_beir

from ragopt.data.beir import load_beir
from ragopt.errors import InputError
from ragopt.eval.judged import project_calls
from ragopt.eval.sweep import SweepConfig, run_sweep
from ragopt.judge.judges import JudgeConfig

CONFIG = SweepConfig(chunk_sizes=["whole"], retrievers=["bm25"], top_k=[1, 3], judge=JudgeConfig(kind="support"),
                     stages={"generate": {"generator": "extractive"}}, gates=["faithfulness>=0.5"])


def test_every_answering_trial_reports_judged_metrics_with_intervals_and_a_rerun_makes_no_call(tmp_path: Path) -> None:
    evalset = load_beir(write_beir(tmp_path / "tiny"))
    first = run_sweep(evalset, CONFIG, tmp_path / "ws", progress=False).results
    assert [t.id for t in first.trials] and first.gates == ["faithfulness>=0.5"]
    for trial in first.trials:
        values = [v for v in trial.per_query["faithfulness"] if v is not None]
        assert values and trial.metrics["faithfulness"] == pytest.approx(sum(values) / len(values))
        iv = trial.intervals["faithfulness"]
        assert iv.low <= iv.mean <= iv.high and "context_relevance" in trial.intervals
        costs = trial.costs.model_dump()
        assert costs["judge_failures"] == 0 and costs["judge_calls"] + costs["judge_cached"] > 0
        assert all(qid in first.query_ids for qid in trial.unsupported)
    assert first.verdicts[first.trials[0].id][0].metric == "faithfulness"
    again = run_sweep(evalset, CONFIG, tmp_path / "ws", progress=False).results
    assert all(t.costs.model_dump()["judge_calls"] == 0 for t in again.trials)
    assert [t.metrics["faithfulness"] for t in again.trials] == [t.metrics["faithfulness"] for t in first.trials]


def test_a_budget_below_the_projected_calls_is_refused_before_any_index_is_built(tmp_path: Path) -> None:
    evalset = load_beir(write_beir(tmp_path / "tiny"))
    capped = CONFIG.model_copy(update={"judge": JudgeConfig(kind="support", max_calls=3)})
    assert project_calls(capped.plans(), len(evalset.queries), 0) == 2 * 2 * len(evalset.queries)
    with pytest.raises(InputError, match="judge calls are projected") as exc:
        run_sweep(evalset, capped, tmp_path / "ws", progress=False)
    assert exc.value.field == "--judge-max-calls"
    assert not (tmp_path / "ws" / "indexes").exists()  # refused before the index was built


def test_the_summary_and_the_report_show_judged_metrics_with_intervals_and_what_judging_cost(tmp_path: Path) -> None:
    from ragopt.eval.report_html import render_html
    from ragopt.eval.report_summary import render_summary

    evalset = load_beir(write_beir(tmp_path / "tiny"))
    results = run_sweep(evalset, CONFIG, tmp_path / "ws", progress=False).results
    trial = results.trials[0]
    iv = trial.intervals["faithfulness"]
    interval = f"{iv.mean:.3f} [{iv.low:.3f}, {iv.high:.3f}]"
    summary, html = render_summary(results), render_html(results)
    assert "## Judged answers" in summary and interval in summary
    assert f"{trial.costs.model_dump()['judge_calls']} calls (" in summary
    assert "<h2>Judged answers</h2>" in html and interval in html


def test_a_missing_judge_model_names_its_flag_before_any_index_is_built(tmp_path: Path) -> None:
    evalset = load_beir(write_beir(tmp_path / "tiny"))
    missing = CONFIG.model_copy(update={"judge": JudgeConfig(kind="llama", model=str(tmp_path / "none.gguf"))})
    with pytest.raises(InputError) as exc:
        run_sweep(evalset, missing, tmp_path / "ws", progress=False)
    assert exc.value.field == "--judge-model" and not (tmp_path / "ws" / "indexes").exists()
