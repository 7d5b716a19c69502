"""The trust check: does a generated evaluation set rank pipelines as people's questions do?

For each labelled BEIR set in ../shared/data (SciFact, HotpotQA dev500, TREC DL 2019's MS MARCO subset), a set
is generated from the corpus alone, with and without `--like`, and the same sweep grid (chunkings 64/128/256
tokens and whole documents x dense, BM25, hybrid RRF, hybrid convex 0.3 and 0.7: 20 configurations, all at
top_k 10) runs on the generated set and on the labelled queries. Per dataset and arm it prints: Kendall tau
(tau-b) between the two rankings of configurations by nDCG@10; the regret of the configuration the generated
set selects (best by its nDCG@10, ties by id), the labelled nDCG@10 of the labelled best minus that of the
selected, with a paired bootstrap interval over the labelled queries; what each filter dropped.

`--like` examples are the TEXT of real queries (never their judgements) that are never scored: queries of the
collection outside the scored split (SciFact's train claims, DL 2019's unjudged queries) first, then, where
those are fewer than --examples, scored queries held out by the seed (at most a third of them). Both arms are
scored on the same remaining queries, so the two columns compare.

Usage: python benchmarks/bench_synthetic.py [--datasets scifact,hotpotqa_dev500,msmarco_dl19_subset]
       [--arms plain,like] [--questions 200] [--examples 40] [--seed 0] [--chunk-sizes 64,128,256,whole]
       [--limit N] [--data DIR] [--workspace DIR] [--json]
The workspace keeps indexes, embeddings, per-query outcomes and each finished (dataset, arm) result, so a
killed run re-run resumes where it stopped. --limit N cuts each corpus to the documents a scored query judges
relevant plus the first N others (a quick run while developing; the trust check runs the full sets). Torch uses one thread. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DATASETS = {"scifact": "scifact", "hotpotqa_dev500": "hotpotqa_dev500/beir_format", "msmarco_dl19_subset": "msmarco_dl19_subset"}
ARMS = ("plain", "like")
RESULT_VERSION = 2  # part of each cached result's key: bump when what a result holds changes


def data_root() -> Path:
    for root in (REPO.parent, REPO.parents[1]):
        if (root / "shared" / "data").is_dir():
            return root / "shared" / "data"
    return REPO.parent / "shared" / "data"


def seeded_order(ids: list[str], seed: int) -> list[str]:
    return sorted(ids, key=lambda i: hashlib.sha256(f"{seed}\x1f{i}".encode()).hexdigest())


def split_queries(folder: Path, scored: list[str], n_examples: int, seed: int) -> tuple[list[tuple[str, str]], list[str]]:
    """(example (id, text) pairs, the ids left to score): see the module."""
    texts = {}
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            texts[str(row["_id"])] = row["text"]
    outside = seeded_order([i for i in texts if i not in set(scored)], seed)[:n_examples]
    held = seeded_order(scored, seed)[: min(n_examples - len(outside), len(scored) // 3)]
    examples = [(i, texts[i]) for i in outside + held]
    return examples, [i for i in scored if i not in set(held)]


def cached(path: Path, compute: Any) -> dict[str, Any]:
    """A finished result is kept as one file (written by rename), so a killed run resumes after it."""
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, sort_keys=True), encoding="utf-8")
    tmp.replace(path)
    return result


def limited(evalset: Any, limit: int | None) -> Any:
    """The set with its corpus cut to the judged documents plus the first `limit` others (None: all)."""
    if limit is None:
        return evalset
    judged = {d for q in evalset.queries for d, g in q.relevance.items() if g > 0}
    others = [d for d in evalset.documents if d.id not in judged][:limit]
    keep = judged | {d.id for d in others}
    return evalset.model_copy(update={"documents": [d for d in evalset.documents if d.id in keep]})


def run_arm(name: str, arm: str, real: Any, examples: list[tuple[str, str]], args: argparse.Namespace, workspace: Path) -> dict[str, Any]:
    from ragopt.synth import SynthConfig
    from ragopt.synth.check import check_against
    from ragopt.synth.generate import synthesize
    from ragopt.synth.like import read_examples

    like = None
    if arm == "like":  # through the file reader `ragopt synth --like` uses
        path = workspace / "bench_synthetic" / f"{name}-examples-{args.seed}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{' '.join(t.split())}\n" for _, t in examples), encoding="utf-8")
        like = read_examples(path)
    t0 = time.perf_counter()
    config = SynthConfig(questions=args.questions, seed=args.seed, like=like)
    print(f"[{name} {arm}] generating {args.questions} questions", file=sys.stderr, flush=True)
    generated, record = synthesize(real.documents, config, workspace, name=f"{name}-{arm}", progress=args.progress)
    gen_s = time.perf_counter() - t0
    print(f"[{name} {arm}] sweeping {len(args.sizes) * 5} configurations on both sets", file=sys.stderr, flush=True)
    checked = check_against(real, generated, workspace, args.sizes, progress=args.progress)
    return {**checked, "kept": record["counts"]["kept"], "dropped": record["counts"]["dropped"],
            "candidates": record["counts"]["candidates"], "round_trip": record["filters"]["round_trip"],
            "like": record.get("like"), "prompt_version": record["prompt_version"], "generate_s": round(gen_s, 1),
            "check_s": round(time.perf_counter() - t0 - gen_s, 1)}


def run_dataset(name: str, args: argparse.Namespace, workspace: Path) -> dict[str, Any]:
    from ragopt.data import load_evalset

    folder = Path(args.data) / DATASETS[name]
    real = load_evalset(folder)
    labelled = [q.query.id for q in real.queries]
    examples, scored_ids = split_queries(folder, labelled, args.examples, args.seed)
    keep = set(scored_ids)
    real = limited(real.model_copy(update={"queries": [q for q in real.queries if q.query.id in keep]}), args.limit)
    out: dict[str, Any] = {"documents": len(real.documents), "scored_queries": len(real.queries), "like_examples": len(examples),
                           "like_examples_held_out_of_scored": len(labelled) - len(scored_ids)}
    from ragopt.synth.like import StyledQuestionGenerator

    for arm in args.arms:  # the like arm's key names its generator's version: a changed generator is a new result
        like = [StyledQuestionGenerator.prompt_version, examples] if arm == "like" else None
        key = hashlib.sha256(json.dumps([RESULT_VERSION, name, arm, args.questions, args.seed, args.sizes, like,
                                         scored_ids, args.limit]).encode()).hexdigest()[:16]
        out[arm] = cached(workspace / "bench_synthetic" / f"{name}-{arm}-{key}.json",
                          lambda: run_arm(name, arm, real, examples, args, workspace))
    return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--arms", default=",".join(ARMS), help="plain (no examples) and/or like (--like examples)")
    p.add_argument("--questions", type=int, default=200)
    p.add_argument("--examples", type=int, default=40, help="--like examples per dataset (see the module)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk-sizes", default="64,128,256,whole")
    p.add_argument("--limit", type=int, default=None, help="judged documents plus this many others (a quick run, not the trust check)")
    p.add_argument("--data", default=str(data_root()), help="the folder holding the labelled sets (default ../shared/data)")
    p.add_argument("--workspace", default=str(REPO / ".ragopt"))
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    args.datasets, args.arms = args.datasets.split(","), args.arms.split(",")
    for flag, values, known in (("--datasets", args.datasets, DATASETS), ("--arms", args.arms, ARMS)):
        if unknown := [v for v in values if v not in known]:
            p.exit(2, f"bench_synthetic.py [{flag}]: unknown {', '.join(unknown)}; known: {', '.join(known)}\n")
    for flag in ("questions", "examples"):
        if getattr(args, flag) <= 0:
            p.exit(2, f"bench_synthetic.py [--{flag}]: must be positive, got {getattr(args, flag)}\n")
    sizes = [s.strip() for s in args.chunk_sizes.split(",")]
    if any(s != "whole" and not (s.isdigit() and int(s) > 0) for s in sizes):
        p.exit(2, f"bench_synthetic.py [--chunk-sizes]: expected whole or positive token counts, got {args.chunk_sizes!r}\n")
    args.sizes = [s if s == "whole" else int(s) for s in sizes]
    for name in args.datasets:  # every labelled set is there before any work starts (the
        # flags first: a bad flag is named wherever the data lies)
        folder = Path(args.data) / DATASETS[name]
        if not (folder / "queries.jsonl").is_file():
            p.exit(2, f"bench_synthetic.py [--data]: {folder}: no queries.jsonl (the labelled BEIR set {name})\n")
    args.progress = sys.stderr.isatty() and not args.json
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    torch.set_num_threads(1)
    workspace = Path(args.workspace)
    report: dict[str, Any] = {"questions": args.questions, "examples": args.examples, "seed": args.seed, "chunk_sizes": args.sizes, "limit": args.limit,
                              "top_k": 10, "metric": "ndcg@10", "datasets": {}}
    for name in args.datasets:
        report["datasets"][name] = run_dataset(name, args, workspace)
    if args.json:
        print(json.dumps(report))
        return 0
    from ragopt.synth.check import lines

    for name, ds in report["datasets"].items():
        print(f"{name}: {ds['documents']} documents, {ds['scored_queries']} labelled queries scored, "
              f"{ds['like_examples']} --like examples ({ds['like_examples_held_out_of_scored']} held out of the labelled ones)")
        for arm in args.arms:
            r = ds[arm]
            print(f"  {arm}: kept {r['kept']} of {r['candidates']} candidates, dropped {r['dropped']}" +
                  (f"; style {r['like']}" if r.get("like") else ""))
            for line in lines(r):
                print(f"    {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
