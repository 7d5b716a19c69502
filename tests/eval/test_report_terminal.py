"""The `ragopt sweep` table (ragopt.eval.report_terminal) on results built directly: no sweep runs."""

from __future__ import annotations

from ragopt.eval.report_terminal import TABLE_WIDTH, table_lines
from ragopt.eval.gates import evaluate_gates, select
from ragopt.eval.results import Costs, DatasetInfo, SweepResults, Trial, TrialParams, Versions


def _results(with_answers: bool = True, with_rerank: bool = True, prefix: str = "d") -> SweepResults:
    trials = []
    for i, depth in enumerate((0, 20, 50)):
        stages = {"embed_p50_ms": 30.0, "embed_p95_ms": 35.0, "vector_p50_ms": 0.2, "vector_p95_ms": 0.4}
        if depth and with_rerank:
            stages |= {"rerank_p50_ms": 40.0 + depth, "rerank_p95_ms": 90.0 + depth}
        metrics = {"ndcg@10": 0.6 + i / 10, "recall@10": 0.8}
        if with_answers:
            metrics |= {"citation_precision": (0.45, 0.7, 0.8)[i], "citation_floor_precision": 0.5,
                        "citation_span_precision": 0.4, "citation_floor_span_precision": 0.3}
        trials.append(Trial(
            id=f"{prefix}{depth}", params=TrialParams(chunker="whole", retriever="dense", top_k=10,
                                               **({"rerank.depth": depth} if with_rerank else {})),
            metrics=metrics,
            costs=Costs(p50_ms=31.0 + 40 * i, p95_ms=36.0 + 90 * i, context_tokens=500.0, **stages),
        ))
    best, _ = select(trials, [])
    return SweepResults(
        dataset=DatasetInfo(name="t", path="t", fingerprint="f", n_documents=3, n_queries=3),
        versions=Versions(ragopt="0", python="3"), objective="o", trials=trials, selected=best.id,
        verdicts={t.id: evaluate_gates(t, []) for t in trials},
    )


def _cells(line: str, header: str, head: str) -> str:
    """The text of column `head` in `line` (columns are right-aligned: a cell ends where its header does)."""
    end = header.index(head) + len(head)
    start = header.rindex("  ", 0, header.index(head)) + 1
    return line[start:end + 1].strip()


def test_the_table_shows_p50_beside_p95_floors_and_the_added_latency_of_a_stage_in_some_trials() -> None:
    lines = table_lines(_results(), width=200)  # wide enough for every column
    header, rows = lines[0], {line.split()[1] if line[2] in "*+" else line.split()[0]: line for line in lines[1:4]}
    assert header.index("p50 ms") < header.index("p95 ms")
    assert "rerank p50/p95" in header and "embed" not in header and "vector" not in header
    assert _cells(rows["d20"], header, "rerank p50/p95") == "60.0/110.0"
    assert _cells(rows["d50"], header, "rerank p50/p95") == "90.0/140.0"
    assert _cells(rows["d0"], header, "rerank p50/p95") == "-"
    assert _cells(rows["d20"], header, "cite precision (floor)") == "0.700 (0.500)"
    assert _cells(rows["d0"], header, "cite precision (floor)") == "0.450 (0.500)!"
    assert _cells(rows["d0"], header, "cite span precision (floor)") == "0.400 (0.300)"
    assert any(line.strip().startswith("! not above its floor beyond noise") for line in lines)


def test_without_answers_or_differing_stages_the_table_has_no_such_columns() -> None:
    lines = table_lines(_results(with_answers=False, with_rerank=False))
    assert "cite" not in lines[0] and "p50/p95" not in lines[0] and "p50 ms" in lines[0]
    assert not any("!" in line or "stage columns" in line for line in lines)


def test_every_line_fits_the_terminal_and_says_which_columns_it_left_out() -> None:
    wide = table_lines(_results(), width=200)
    assert max(map(len, wide)) > TABLE_WIDTH  # the full table would wrap
    lines = table_lines(_results())
    assert max(map(len, lines)) <= TABLE_WIDTH
    header = lines[0]
    for kept in ("ndcg@10", "ctx tok", "p95 ms", "p50 ms"):  # the objective, the costs first
        assert kept in header
    left_out = next(line for line in lines if "more columns in summary.md and results.csv" in line)
    # rerank, which the swept depth switches on and off, is a key column; the other citation columns make way
    assert "rerank p50/p95" in header and "cite span precision (floor)" in left_out
    assert [line.split()[1] for line in lines[1:4]] == [line.split()[1] for line in wide[1:4]]  # the same trials


def test_a_trial_id_too_long_for_one_line_puts_its_figures_under_it() -> None:
    long_id = "emb-" + "x" * 90 + "-d"
    lines = table_lines(_results(with_answers=False, with_rerank=False, prefix=long_id))
    assert max(map(len, lines)) <= TABLE_WIDTH
    assert lines[2].strip() in {f"* {long_id}0", f"* {long_id}20", f"* {long_id}50"} and "ctx tok" in lines[1]
    assert lines[3].split()[0][0].isdigit()  # the figures, on the line under their trial
