"""How far can the extractive answerer's passage choice beat always citing [1]? An upper bound (docs/answers.md).

    python scripts/answer_signal_ceiling.py [--dataset DIR] [--split test] [--limit N] [--chunk-size 64|whole]
        [--retriever hybrid|dense|bm25] [--top-k 5] [--query-likelihood] [--json] [--workspace DIR]

Retrieves every query of a labelled set with one plan (default: the main job's selected trial, 64-token chunks,
hybrid RRF, K = 5), computes for every candidate sentence of the top passages each signal ragopt can compute
offline, and then answers with EVERY weighting of them on a grid, keeping the weighting that cites the right
document (and, separately, the right span) most often ON THESE SAME QUERIES. That choice sees the answers it is
scored on, so its figures are a ceiling for the signals, not a result: if even it does not beat the floor beyond
noise (95% paired bootstrap interval of the per-query difference above zero), no default chosen honestly on a
training split will.

Signals, each scaled to [0, 1] over a query's candidates: the answerer's own four (meaning by the plan's
embedder, lexical support, reciprocal rank, the question's terms in the passage's title:
ragopt.stages.generate_extractive), how many of the top passages come from the passage's document, and the
reciprocal rank of its document's first passage. `--query-likelihood` adds log P(question | passage) by the
default local LLM (SmolLM2-135M through llama.cpp; "UPR", Sachan et al. 2022) and prints its token cost.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ragopt.errors import InputError  # noqa: E402

GRID = [0.0, 0.25, 0.5, 1.0]
SEED = 0
OWN = ("meaning", "lexical", "rank", "title")  # the answerer's signals
EXTRA = ("document_repeats", "document_rank")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default=str(ROOT / "evalsets" / "hospital"))
    p.add_argument("--split", default="test", help="qrels split of a BEIR folder")
    p.add_argument("--limit", type=int, default=None, help="a seeded sample of at most N queries")
    p.add_argument("--chunk-size", default="64", help="tokens per chunk (overlap 16), or 'whole'")
    p.add_argument("--retriever", choices=["hybrid", "dense", "bm25"], default="hybrid")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--query-likelihood", action="store_true", help="add the local LLM's log P(question | passage)")
    p.add_argument("--workspace", default=None)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.chunk_size != "whole" and not (args.chunk_size.isdigit() and int(args.chunk_size) > 16):
        raise InputError("must be a number of tokens above 16, or 'whole'", field="--chunk-size")
    for flag in ("limit", "top_k"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise InputError("must be positive", field="--" + flag.replace("_", "-"))
    if not Path(args.dataset).is_dir():
        raise InputError("dataset folder not found", path=args.dataset, field="--dataset")
    return args


def _evalset(args: argparse.Namespace) -> Any:
    from ragopt.data import load_evalset
    from ragopt.eval.heldout import split_holdout

    evalset = load_evalset(args.dataset, split=args.split)
    if args.limit is not None and args.limit < len(evalset.queries):
        evalset = split_holdout(evalset, args.limit / len(evalset.queries), SEED)[1]
    return evalset


def _retrieve(evalset: Any, args: argparse.Namespace, workspace: Path) -> tuple[list[Any], Any]:
    """Per query the retrieved hits, and the answerer that reads meaning through the plan's embedder."""
    from ragopt.backends.embeddings import auto_retrieval
    from ragopt.config import ChunkerConfig, EmbedderConfig, RetrievalConfig
    from ragopt.index import build_index, make_embedder
    from ragopt.plan import PlanConfig, pipeline_for
    from ragopt.stages.generate_extractive import ExtractiveConfig, ExtractiveGenerator

    retrieval = RetrievalConfig(retriever=args.retriever, top_k=args.top_k)
    _, embedder_config, _ = auto_retrieval(retrieval, EmbedderConfig(),
                                           (d.text for d in evalset.documents), embedder_given=False)
    embedder = make_embedder(workspace, embedder_config)
    chunker = (ChunkerConfig(mode="whole") if args.chunk_size == "whole"
               else ChunkerConfig(mode="tokens", size=int(args.chunk_size), overlap=16))
    report = build_index(evalset.documents, chunker, embedder, workspace, progress=True, dense=args.retriever != "bm25")
    plan = PlanConfig(chunker=report.index.manifest.chunker, embedder=embedder.config, retrieval=retrieval)
    pipeline = pipeline_for(plan, report.index, embedder, workspace)
    answerer = ExtractiveGenerator(ExtractiveConfig(meaning_weight=1.0, max_passages=args.top_k),
                                   analyzer=report.index.analyzer(retrieval.bm25), embedder=embedder)
    hits = []
    for i, q in enumerate(evalset.queries):
        print(f"retrieving {i + 1}/{len(evalset.queries)}", file=sys.stderr, end="\r")
        hits.append(pipeline.run(q.query).hits)
    print(file=sys.stderr)
    return hits, answerer


def _query_rows(evalset: Any, hits: list[Any], answerer: Any, likelihood: Any) -> list[dict[str, Any]]:
    """Per query: each candidate's signals, and for each top passage whether it is gold (document, span)."""
    import numpy as np

    from ragopt.eval.citations import first_passage_floor
    from ragopt.eval.scoring import citation_gold
    from ragopt.fusion.convex import normalize
    from ragopt.pipeline import RequestState
    from ragopt.stages.prompt import number_passages

    rows = []
    for i, (q, query_hits) in enumerate(zip(evalset.queries, hits)):
        print(f"signals {i + 1}/{len(evalset.queries)}", file=sys.stderr, end="\r")
        passages = number_passages(query_hits, limit=answerer.config.max_passages, max_chars=None)
        if not passages:
            continue
        sig = answerer.signals(RequestState(query=q.query, hits=query_hits), passages)
        chunks = [p.hit.chunk for p in passages]
        docs = [c.doc_id for c in chunks]
        per_passage = {
            "document_repeats": [float(docs.count(d)) for d in docs],
            "document_rank": [1 / (docs.index(d) + 1) for d in docs],
        }
        if likelihood is not None:
            per_passage["likelihood"] = [likelihood(q.query.text, c.title, p.text) for c, p in zip(chunks, passages)]
        # candidates come in passage order, then sentence order: argmax's first maximum breaks ties as the answerer
        numbers = np.array([c[0] for c in sig.candidates]) - 1
        signals = {"meaning": sig.meaning, "lexical": sig.lexical, "rank": sig.retrieval, "title": sig.title}
        for name, values in per_passage.items():
            signals[name] = normalize(np.asarray(values, dtype=float)[numbers], "minmax")
        evidence = citation_gold(q)
        cited_alone = [first_passage_floor(c, evidence) for c in chunks]  # each scored as if it were [1]
        gold = {"doc_ok": [s.precision for s in cited_alone], "span_ok": [s.span_precision for s in cited_alone]}
        rows.append({"signals": {k: np.asarray(v, dtype=float) for k, v in signals.items()},
                     "floor": {level: float(ok[0]) for level, ok in gold.items()},  # always citing [1]
                     **{level: np.asarray(ok, dtype=float)[numbers] for level, ok in gold.items()}})
    print(file=sys.stderr)
    return rows


def _likelihood_scorer() -> tuple[Any, dict[str, float]]:
    """log P(question | passage) by the default GGUF, and a counter of the tokens it evaluated and its seconds."""
    import numpy as np
    from llama_cpp import Llama

    from ragopt.gguf_meta import resolve_model

    llm = Llama(model_path=str(resolve_model(None)), n_ctx=2048, logits_all=True, verbose=False, seed=SEED)
    cost = {"tokens": 0.0, "seconds": 0.0}

    def score(question: str, title: str | None, text: str) -> float:
        start = time.perf_counter()
        prefix = llm.tokenize(f"Passage: {title or ''}\n{text}\n\nA question this passage answers:".encode())
        asked = llm.tokenize((" " + question).encode(), add_bos=False)
        prefix = prefix[: llm.n_ctx() - len(asked)]  # the passage's end gives way, never the question
        llm.reset()
        llm.eval(prefix + asked)
        logits = llm.scores[len(prefix) - 1: len(prefix) + len(asked) - 1]
        logp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
        cost["tokens"] += len(prefix) + len(asked)
        cost["seconds"] += time.perf_counter() - start
        return float(logp[np.arange(len(asked)), asked].sum())

    return score, cost


def _ceiling(rows: list[dict[str, Any]], names: tuple[str, ...], level: str) -> dict[str, Any]:
    """The weighting of `names` on the grid that is right most often at `level` (the first in grid order among
    equals), against the floor: per query, every weighting's best candidate at once (weightings x candidates)."""
    import numpy as np

    from ragopt.eval.bootstrap import paired_bootstrap_ci

    grid = np.array([w for w in itertools.product(GRID, repeat=len(names)) if any(w)])
    right = np.stack([r[level][np.argmax(grid @ np.stack([r["signals"][n] for n in names]), axis=1)] for r in rows],
                     axis=1)  # weightings x queries
    best = int(np.argmax(right.sum(axis=1)))
    floor = [r["floor"][level] for r in rows]
    ci = paired_bootstrap_ci(right[best].tolist(), floor)
    return {"level": level, "signals": list(names), "weights": dict(zip(names, grid[best].tolist())),
            "value": float(right[best].mean()), "floor": sum(floor) / len(floor), "diff": ci.mean_diff,
            "ci_low": ci.low, "ci_high": ci.high, "n": len(rows), "above_floor": ci.low > 0}


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    from ragopt.workspace import workspace_dir

    workspace = workspace_dir(args.workspace)
    evalset = _evalset(args)
    hits, answerer = _retrieve(evalset, args, workspace)
    likelihood, cost = _likelihood_scorer() if args.query_likelihood else (None, None)
    rows = _query_rows(evalset, hits, answerer, likelihood)
    sets = [OWN, OWN + EXTRA] + ([("rank", "likelihood"), OWN + EXTRA + ("likelihood",)] if likelihood else [])
    results = [_ceiling(rows, names, level) for names in sets for level in ("doc_ok", "span_ok")]
    out = {"dataset": args.dataset, "split": args.split, "queries": len(rows), "chunk_size": args.chunk_size,
           "retriever": args.retriever, "top_k": args.top_k, "ceilings": results,
           "likelihood_cost": cost}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{evalset.name}: {len(rows)} queries, {args.retriever} top {args.top_k}, chunks {args.chunk_size}; the best "
          "weighting chosen on these same queries (a ceiling)")
    for r in results:
        ci = f"{r['diff']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]"
        level = "document" if r["level"] == "doc_ok" else "span"
        print(f"  {level:<9}{'+'.join(r['signals']):<70}{r['value']:.3f} vs floor {r['floor']:.3f}  {ci}  "
              f"{'above' if r['above_floor'] else 'not above'}")
    if cost:
        print(f"  likelihood: {cost['tokens']:.0f} tokens in {cost['seconds']:.0f} s "
              f"({cost['tokens'] / max(cost['seconds'], 1e-9):.0f} tokens/s)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
