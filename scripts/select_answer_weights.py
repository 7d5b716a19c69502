"""Select the extractive answerer's sentence-score weights on training splits, then report its answer figures on
the held-out ones beside their floors (docs/answers.md).

    python scripts/select_answer_weights.py [--data ../shared/data] [--meaning on|off] [--sets a,b]
        [--select-queries N] [--report-queries N] [--per-set] [--json] [--workspace DIR]

Three labelled sets, each split so that nothing reported was seen while selecting:
- SciFact: selected on train, reported on test; span citation precision against the rationale sentences.
- CMRC 2018 dev: a seeded holdout (half); answer-contains-reference and span citation precision.
- HotpotQA dev500: a seeded holdout (half); answer-contains-reference and document citation precision against
  the supporting paragraphs.
Retrieval is BM25 (the analyzer `auto` picks: jieba words on CMRC), top 5 whole documents; sentence meaning uses
the embedder `--retriever auto` picks for the corpus (all-MiniLM-L6-v2 for English, the bundled
multilingual-e5-small for Chinese). On this shared 2-core machine embedding every candidate sentence is the cost,
so selection uses a seeded sample of at most 100 queries per set and reporting at most 150. Every weight
combination of the grid answers every selection query; the one with the largest summed margin over the floors,
averaged over the sets, becomes the default (ties: the first in grid order). Each figure is printed with its floor
and the 95% paired bootstrap interval of the difference; "above" only when that interval lies above zero.
`--meaning off` selects lexical, rank and title weights without embedding a sentence. `--per-set` selects each
set's own weights on its own selection split, as a sweep tuning the knobs on a user's collection would.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ragopt.errors import InputError  # noqa: E402

GRID = [0.0, 0.25, 0.5, 1.0]  # each weight; combinations equal up to scale (and all zero) are left out
SENTENCES = [1, 2]
SEED = 0
MAX_SELECTION_QUERIES = 100  # a seeded sample of each selection split (the cost is every combination x query)
MAX_REPORT_QUERIES = 150
# (name, folder under --data, selection split or None for a holdout, report split, [(figure, floor)])
SETS = [
    ("scifact", "scifact", "train", "test", [("citation_span_precision", "citation_floor_span_precision")]),
    ("cmrc2018_dev", "cmrc2018_dev", None, "test", [("answer_contains_reference", "answer_lead_contains_reference"),
                                                   ("citation_span_precision", "citation_floor_span_precision")]),
    ("hotpotqa_dev500", "hotpotqa_dev500/beir_format", None, "test",
     [("answer_contains_reference", "answer_lead_contains_reference"), ("citation_precision", "citation_floor_precision")]),
]
HOLDOUT = 0.5
TOP_K = 5


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"), help="folder holding the three datasets")
    p.add_argument("--workspace", default=None, help="ragopt workspace (indexes, embedding cache)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    p.add_argument("--meaning", choices=["on", "off"], default="on",
                   help="off: select lexical and rank weights only (meaning_weight 0), without embedding a sentence")
    p.add_argument("--select-queries", type=int, default=MAX_SELECTION_QUERIES, help="most selection queries per set")
    p.add_argument("--report-queries", type=int, default=MAX_REPORT_QUERIES, help="most reported queries per set")
    p.add_argument("--per-set", action="store_true", help="select each set's weights on its own selection split")
    p.add_argument("--sets", default=",".join(e[0] for e in SETS),
                   help="comma-separated sets to select and report on (default: all three)")
    args = p.parse_args(argv)
    for flag in ("select_queries", "report_queries"):
        if getattr(args, flag) < 1:
            raise InputError("must be a positive number of queries", field="--" + flag.replace("_", "-"))
    args.sets = [name.strip() for name in args.sets.split(",") if name.strip()]
    unknown = [n for n in args.sets if n not in {e[0] for e in SETS}]
    if unknown or not args.sets:
        raise InputError(f"unknown set {unknown[0] if unknown else '(none)'}; known: {', '.join(e[0] for e in SETS)}",
                         field="--sets")
    return args


def _splits(folder: Path, select: str | None, report: str, most: tuple[int, int]) -> tuple[Any, Any]:
    from ragopt.data import load_evalset
    from ragopt.eval.heldout import split_holdout

    if select is not None:
        selection, held = load_evalset(str(folder), split=select), load_evalset(str(folder), split=report)
    else:
        selection, held = split_holdout(load_evalset(str(folder), split=report), HOLDOUT, SEED)
    return _sample(selection, most[0]), _sample(held, most[1])


def _sample(evalset: Any, most: int) -> Any:
    """A seeded sample of at most `most` queries."""
    from ragopt.eval.heldout import split_holdout

    if len(evalset.queries) <= most:
        return evalset
    return split_holdout(evalset, most / len(evalset.queries), SEED)[1]


def _plan_parts(evalset: Any, workspace: Path) -> tuple[Any, Any, Any]:
    """(BM25 retrieval, the embedder `--retriever auto` picks for this corpus, index report)."""
    from ragopt.backends.embeddings import auto_retrieval
    from ragopt.config import ChunkerConfig, EmbedderConfig, RetrievalConfig
    from ragopt.index import build_index, make_embedder

    retrieval = RetrievalConfig(retriever="bm25", top_k=TOP_K)
    _, embedder_config, _ = auto_retrieval(retrieval, EmbedderConfig(), (d.text for d in evalset.documents),
                                           embedder_given=False)
    embedder = make_embedder(workspace, embedder_config)
    report = build_index(evalset.documents, ChunkerConfig(mode="whole"), embedder, workspace, progress=True, dense=False)
    return retrieval, embedder, report


def _signals(evalset: Any, parts: tuple[Any, Any, Any], workspace: Path, meaning: bool) -> list[tuple[Any, list, Any]]:
    """Per query: (ranking, numbered passages, sentence signals), computed once: every weight combination then
    chooses from the same signals, exactly as ExtractiveGenerator.run would (ragopt.stages.generate_extractive)."""
    from ragopt.pipeline import RequestState
    from ragopt.plan import PlanConfig, pipeline_for
    from ragopt.stages.generate_extractive import ExtractiveConfig, ExtractiveGenerator
    from ragopt.stages.prompt import number_passages

    retrieval, embedder, report = parts
    plan = PlanConfig(chunker=report.index.manifest.chunker, embedder=embedder.config, retrieval=retrieval)
    pipeline = pipeline_for(plan, report.index, embedder, workspace)
    generator = ExtractiveGenerator(ExtractiveConfig(meaning_weight=1.0), analyzer=report.index.analyzer(retrieval.bm25),
                                    embedder=embedder if meaning else None)
    out = []
    for i, q in enumerate(evalset.queries):
        print(f"{evalset.name}: signals {i + 1}/{len(evalset.queries)}", file=sys.stderr, end="\r")
        hits = pipeline.run(q.query).hits
        passages = number_passages(hits, limit=generator.config.max_passages, max_chars=None)
        ranking = [(h.chunk.id, h.chunk.doc_id, h.chunk.start, h.chunk.end, h.score) for h in hits]
        out.append((ranking, passages, generator.signals(RequestState(query=q.query, hits=hits), passages)))
    print(file=sys.stderr)
    return out


def _answer(evalset: Any, signals: list[tuple[Any, list, Any]], weights: dict[str, Any]) -> dict[str, list]:
    """Per-query citation and answer figures (with their floors) of the extractive answerer at `weights`."""
    from ragopt.eval.executor import QueryOutcome
    from ragopt.eval.scoring import citation_scores
    from ragopt.stages.generate_extractive import ExtractiveConfig, extractive_answer

    config = ExtractiveConfig(**weights)
    outcomes = [QueryOutcome(query_id=q.query.id, ranking=ranking, stage_ms={},
                             answer=extractive_answer(sig, passages, config).model_dump() if passages else None)
                for q, (ranking, passages, sig) in zip(evalset.queries, signals)]
    return citation_scores(outcomes, evalset)


def _margin(per_query: dict[str, list], pairs: list[tuple[str, str]]) -> float:
    """Summed mean difference figure - floor over the pairs (queries where both are defined)."""
    total = 0.0
    for figure, floor in pairs:
        diffs = [a - b for a, b in zip(per_query[figure], per_query[floor]) if a is not None and b is not None]
        total += sum(diffs) / len(diffs) if diffs else 0.0
    return total


def _grid(meaning: bool) -> list[dict[str, Any]]:
    """Weight combinations, one per direction: a score scaled by a constant picks the same sentences."""
    combos, seen = [], set()
    for n, (m, x, r, t) in itertools.product(SENTENCES, itertools.product(GRID if meaning else [0.0], GRID, GRID, GRID)):
        top = max(m, x, r, t)
        direction = (n, *(round(w / top, 6) for w in (m, x, r, t))) if top else None
        if direction is None or direction in seen:
            continue
        seen.add(direction)
        combos.append({"meaning_weight": m, "lexical_weight": x, "rank_weight": r, "title_weight": t, "max_sentences": n})
    return combos


def _figure_rows(name: str, per_query: dict[str, list], pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    from ragopt.eval.bootstrap import paired_bootstrap_ci
    from ragopt.eval.metrics import mean

    rows = []
    for figure, floor in pairs:
        ci = paired_bootstrap_ci(per_query[figure], per_query[floor])
        rows.append({"set": name, "figure": figure, "value": mean(per_query[figure]), "floor": mean(per_query[floor]),
                     "diff": ci.mean_diff, "ci_low": ci.low, "ci_high": ci.high, "n": ci.n, "above": ci.low > 0})
    return rows


def _joint(margins: dict[str, list[float]]) -> list[float]:
    """Each weighting's margin averaged over the sets."""
    return [sum(values) / len(values) for values in zip(*margins.values())]


def _select(grid: list[dict[str, Any]], margins: dict[str, list[float]], per_set: bool) -> dict[str, dict[str, Any]]:
    """Each set's weighting: the one with the largest margin on its own selection split (`per_set`), or the one
    with the largest margin averaged over the sets for all; ties go to the first in grid order."""
    def best(values: list[float]) -> dict[str, Any]:
        return grid[max(range(len(grid)), key=lambda i: (values[i], -i))]

    if per_set:
        return {name: best(values) for name, values in margins.items()}
    joint = best(_joint(margins))
    return {name: joint for name in margins}


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    from ragopt.workspace import workspace_dir

    workspace = workspace_dir(args.workspace)
    data = Path(args.data)
    chosen_sets = [entry for entry in SETS if entry[0] in args.sets]
    for _, folder, *_ in chosen_sets:
        if not (data / folder).is_dir():
            raise InputError("dataset folder not found", path=data / folder, field="--data")
    meaning = args.meaning == "on"
    grid = _grid(meaning)
    loaded = []
    for name, folder, select, report, pairs in chosen_sets:
        selection, held = _splits(data / folder, select, report, (args.select_queries, args.report_queries))
        parts = _plan_parts(selection, workspace)
        loaded.append((name, selection, held, parts, pairs, _signals(selection, parts, workspace, meaning)))
    # margins[set][weighting]: each set's summed margin over its floors on its selection split
    margins = {name: [_margin(_answer(selection, sig, w), pairs) for w in grid]
               for name, selection, _, _, pairs, sig in loaded}
    chosen = _select(grid, margins, args.per_set)
    rows = []
    for name, _, held, parts, pairs, _ in loaded:
        sig = _signals(held, parts, workspace, meaning)
        rows += _figure_rows(name, _answer(held, sig, chosen[name]), pairs)
        if meaning:
            rows += [dict(r, figure=r["figure"] + " (lexical scorer)")
                     for r in _figure_rows(name, _answer(held, sig, {**chosen[name], "meaning_weight": 0.0}), pairs)]
    out = {"selected": chosen, "per_set": args.per_set, "sets": [e[0] for e in chosen_sets],
           "queries": {name: [len(selection.queries), len(held.queries)] for name, selection, held, *_ in loaded},
           "ranking": sorted(({"weights": w, "margin": m} for w, m in zip(grid, _joint(margins))), key=lambda r: -r["margin"])[:10],
           "rows": rows}
    if args.json:
        print(json.dumps(out))
        return 0
    for name, weights in chosen.items():
        print(f"{name}: selected {weights} on {'its own selection split' if args.per_set else 'all the selection splits'}")
    print(f"{'set':<16}{'figure':<48}{'value':>8}{'floor':>8}{'diff [95% CI]':>28}{'n':>6}  above floor")
    for r in rows:
        ci = f"{r['diff']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]"
        print(f"{r['set']:<16}{r['figure']:<48}{r['value']:>8.3f}{r['floor']:>8.3f}{ci:>28}{r['n']:>6}  "
              f"{'yes' if r['above'] else 'no'}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
