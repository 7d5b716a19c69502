from ragopt.eval.report import csv_rows, render_summary
from synthetic_results import make_results, make_rich_results


def _summary_header(md: str) -> list[str]:
    table = md[md.index("## Trials"):]
    row = next(line for line in table.splitlines() if line.startswith("| #"))
    return [c.strip() for c in row.strip("|").split("|")]


def test_summary_keeps_the_key_columns_and_the_csv_keeps_all():
    results = make_results(gates=["recall@10>=0.85", "mrr@10>=0.5", "p95_ms<=40"])
    md = render_summary(results)
    header = _summary_header(md)
    # params (top_k is the trial's K), the objective's quality and the gates' metrics, the costs that decide
    assert header == ["#", "trial", "chunker", "retriever", "top_k", "recall@10", "mrr@10", "ctx tokens", "p50 ms", "p95 ms", "gates"]
    csv_header, _ = csv_rows(results)
    for col in ("precision@10", "hit@10", "span_recall@10", "ndcg@10", "p99_ms", "index_build_s", "n_chunks"):
        assert col in csv_header and col not in header
    assert "every metric and cost of every trial is in `results.csv`" in md
    # a swept knob of a later stage is a column; without gates the quality metric (ndcg@10) is
    no_gates = make_results(gates=[])
    no_gates.trials[0].params = no_gates.trials[0].params.model_copy(update={"rerank_depth": 20})
    header = _summary_header(render_summary(no_gates))
    assert header == ["#", "trial", "chunker", "retriever", "top_k", "rerank_depth", "ndcg@10", "ctx tokens", "p50 ms", "p95 ms", "gates"]


def _md_table(md: str, heading: str) -> list[dict[str, str]]:
    """The first markdown table after `heading`, as {header: cell} rows."""
    lines = [line for line in md[md.index(heading):].splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    head, _align, *body = rows
    return [dict(zip(head, row)) for row in body]


def test_summary_shows_the_held_out_split_its_intervals_and_overfit():
    results = make_rich_results()
    h = results.held_out
    md = render_summary(results)
    assert "## Held out: selected on `train`, reported on `test`: **OVERFIT** (ndcg@10)" in md
    assert f"`{h.trial}` re-run on the test split's 40 queries" in md and "95% bootstrap interval" in md
    rows = {r["metric"]: r for r in _md_table(md, "## Held out")}
    assert set(rows) == {"ndcg@10", "recall@10"}
    ndcg_sel, ndcg_held = h.selection_intervals["ndcg@10"], h.intervals["ndcg@10"]
    assert rows["ndcg@10"]["selection (train)"] == f"{ndcg_sel.mean:.3f} [{ndcg_sel.low:.3f}, {ndcg_sel.high:.3f}]"
    assert rows["ndcg@10"]["held out (test)"] == f"{ndcg_held.mean:.3f} [{ndcg_held.low:.3f}, {ndcg_held.high:.3f}]"
    assert rows["ndcg@10"]["result"] == "**OVERFIT**"
    assert rows["recall@10"]["result"] == "within the selection interval"
    # held out and holding up: no OVERFIT anywhere; no held-out split: no section
    results.held_out = h.model_copy(update={"overfit": {name: False for name in h.overfit}})
    calm = render_summary(results)
    assert "## Held out: selected on `train`, reported on `test`\n" in calm
    assert [r["result"] for r in _md_table(calm, "## Held out")] == ["within the selection interval"] * 2
    assert "## Held out" not in render_summary(make_results())


def test_a_gate_passing_only_within_noise_is_marked():
    results = make_rich_results()
    md = render_summary(results)
    gates = {r["gate"]: r["result"] for r in _md_table(md, f"## Selected: `{results.selected}`")}
    assert gates["`recall@10>=0.85`"].startswith("pass, **within noise**: ")
    assert gates["`ndcg@10>=0.6`"].startswith("pass: ")  # its interval is well above the threshold
    assert "**within noise**: `recall@10>=0.85` passes only within noise" in md
    trials = {r["trial"]: r for r in _md_table(md, "## Trials")}
    assert trials[f"**{results.selected}**"]["gates"] == "pass (**within noise**: `recall@10>=0.85`)"
    assert sum("within noise" in r["gates"] for r in trials.values()) == 1
    assert "within noise" not in render_summary(make_results())


def test_citation_precision_is_shown_beside_its_floor_and_marked_below_it():
    results = make_rich_results()
    md = render_summary(results)
    assert ("Answers: citation precision 0.610 (floor 0.520), citation span precision 0.480 (floor 0.310). "
            "Citation precision is beside its floor, what always citing [1] (the top passage) scores") in md
    rows = _md_table(md, "## Trials")
    assert rows[0]["citation precision"] == "0.610 (floor 0.520)"
    assert rows[0]["citation span precision"] == "0.480 (floor 0.310)"
    marked = [r["trial"] for r in rows if "not above floor" in r["citation span precision"]]
    below = next(t for t in results.trials if t.metrics["citation_span_precision"] < 0.31)
    assert marked == [below.id]
    assert next(r for r in rows if r["trial"] == below.id)["citation span precision"] == \
        "0.270 (floor 0.310) **not above floor**"
    assert not any("not above floor" in r["citation precision"] for r in rows)
    # no answers scored: no citation columns
    assert not any(h.startswith("citation") for h in _summary_header(render_summary(make_results())))


def test_a_stage_in_only_some_trials_gets_its_own_p50_p95_columns():
    results = make_rich_results()
    md = render_summary(results)
    header = _summary_header(md)
    assert header[-3:] == ["rerank p50 ms", "rerank p95 ms", "gates"]
    assert "vector p50 ms" not in header  # in every trial, nothing swept names it
    assert "p50 ms" in header and header.index("p50 ms") + 1 == header.index("p95 ms")
    rows = {r["trial"].strip("*"): r for r in _md_table(md, "## Trials")}
    for t in results.trials:
        extra = t.costs.model_dump()
        if "rerank_p50_ms" in extra:
            assert rows[t.id]["rerank p50 ms"] == f"{extra['rerank_p50_ms']:.1f}"
            assert rows[t.id]["rerank p95 ms"] == f"{extra['rerank_p95_ms']:.1f}"
        else:
            assert rows[t.id]["rerank p50 ms"] == rows[t.id]["rerank p95 ms"] == "–"
    assert "Stage columns (`rerank`): the latency that stage adds" in md
