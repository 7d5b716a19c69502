from html_check import check_html, table_rows
from ragopt.eval.report import render_html
from synthetic_results import make_results, make_rich_results


def _section(page: str, start: str, end: str = "<h2>") -> str:
    i = page.index(start)
    return page[i:page.index(end, i + len(start))]


def test_page_shows_the_held_out_split_its_intervals_and_overfit():
    results = make_rich_results()
    h = results.held_out
    page = render_html(results)
    check_html(page)
    assert ("<h2>Held out: selected on <code>train</code>, reported on <code>test</code> "
            "<span class='fail'>OVERFIT</span></h2>") in page
    rows = {r["metric"]: r for r in table_rows(page, "heldout")}
    sel, held = h.selection_intervals["ndcg@10"], h.intervals["ndcg@10"]
    assert rows["ndcg@10"]["selection (train)"] == f"{sel.mean:.3f} [{sel.low:.3f}, {sel.high:.3f}]"
    assert rows["ndcg@10"]["held out (test)"] == f"{held.mean:.3f} [{held.low:.3f}, {held.high:.3f}]"
    assert rows["ndcg@10"]["result"] == "OVERFIT" and rows["recall@10"]["result"] == "within the selection interval"
    assert "Held out" not in render_html(make_results())


def test_page_marks_a_gate_passing_only_within_noise():
    results = make_rich_results()
    page = render_html(results)
    verdicts = {r["gate"]: r["result"] for r in table_rows(page, "verdicts")}
    assert verdicts["recall@10>=0.85"] == "pass within noise" and verdicts["ndcg@10>=0.6"] == "pass"
    banner = _section(page, "<section class='card banner'>", "</section>")
    assert "<span class='noise'>within noise</span> <code>recall@10&gt;=0.85</code> passes only within noise" in banner
    trials = table_rows(page, "trials")
    assert [r["trial"] for r in trials if "within noise" in r["gates"]] == [results.selected]
    assert "class='noise'" not in render_html(make_results())


def test_page_shows_citation_precision_beside_its_floor():
    results = make_rich_results()
    page = render_html(results)
    banner = _section(page, "<section class='card banner'>", "</section>")
    assert "Answers: citation precision 0.610 (floor 0.520), citation span precision 0.480 (floor 0.310)." in banner
    rows = table_rows(page, "trials")
    below = next(t for t in results.trials if t.metrics["citation_span_precision"] < 0.31)
    assert [r["trial"] for r in rows if "not above floor" in r["citation span precision"]] == [below.id]
    assert next(r for r in rows if r["trial"] == below.id)["citation span precision"] == "0.270 (floor 0.310) not above floor"
    assert rows[0]["citation precision"] == "0.610 (floor 0.520)"
    assert "citation precision" not in table_rows(render_html(make_results()), "trials")[0]


def test_page_gives_a_stage_in_only_some_trials_its_p50_p95_columns():
    results = make_rich_results()
    rows = {r["trial"]: r for r in table_rows(render_html(results), "trials")}
    some = next(iter(rows.values()))
    assert {"p50 ms", "p95 ms", "rerank p50 ms", "rerank p95 ms"} <= set(some) and "vector p50 ms" not in some
    for t in results.trials:
        extra = t.costs.model_dump()
        got = (rows[t.id]["rerank p50 ms"], rows[t.id]["rerank p95 ms"])
        want = (f"{extra['rerank_p50_ms']:.1f}", f"{extra['rerank_p95_ms']:.1f}") if "rerank_p50_ms" in extra else ("–", "–")
        assert got == want, t.id
    assert not any(h.startswith("rerank") for h in table_rows(render_html(make_results()), "trials")[0])
