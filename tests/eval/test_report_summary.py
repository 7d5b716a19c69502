from ragopt.eval.report import csv_rows, render_summary
from synthetic_results import make_results


def _summary_header(md: str) -> list[str]:
    table = md[md.index("## Trials"):]
    row = next(line for line in table.splitlines() if line.startswith("| #"))
    return [c.strip() for c in row.strip("|").split("|")]


def test_summary_keeps_the_key_columns_and_the_csv_keeps_all():
    results = make_results(gates=["recall@10>=0.85", "mrr@10>=0.5", "p95_ms<=40"])
    md = render_summary(results)
    header = _summary_header(md)
    # params (top_k is the trial's K), the objective's quality and the gates' metrics, the costs that decide
    assert header == ["#", "trial", "chunker", "retriever", "top_k", "recall@10", "mrr@10", "ctx tokens", "p95 ms", "gates"]
    csv_header, _ = csv_rows(results)
    for col in ("precision@10", "hit@10", "span_recall@10", "ndcg@10", "p99_ms", "index_build_s", "n_chunks"):
        assert col in csv_header and col not in header
    assert "every metric and cost of every trial is in `results.csv`" in md
    # a swept knob of a later stage is a column; without gates the quality metric (ndcg@10) is
    no_gates = make_results(gates=[])
    no_gates.trials[0].params = no_gates.trials[0].params.model_copy(update={"rerank_depth": 20})
    header = _summary_header(render_summary(no_gates))
    assert header == ["#", "trial", "chunker", "retriever", "top_k", "rerank_depth", "ndcg@10", "ctx tokens", "p95 ms", "gates"]
