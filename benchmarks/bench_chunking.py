"""Chunkers scored by the characters that reach the prompt, on Chroma's chunking benchmark (or any set with evidence).

One run, the same questions, the same embedder (all-MiniLM-L6-v2, ragopt's cached Embedder), K passages (5) by exact
cosine over ONE pool of every document's chunks (ties by chunk id), lengths in MiniLM word pieces without special
tokens. Scenarios:
- LangChain's RecursiveCharacterTextSplitter with Chroma's separators at Chroma's settings (size/overlap in MiniLM
  tokens: 200/0, 400/0, 400/200, 800/400, 250/125); its chunks are located in order in the text (LangChain's
  add_start_index subtracts a token overlap from a character offset);
- chonkie's RecursiveChunker and SemanticChunker (MiniLM, offline) where chonkie is installed;
- ragopt's chunkers through ragopt's own plan (index, dense retrieval, the small_to_big stage), with and without
  small-to-big, and a few with ragopt's BM25 / hybrid retrieval.
Columns: Chroma's recall, precision and IoU in characters at K (scored here, from the definitions alone: each
character a (document, offset) pair, retrieved characters summed over passages), context tokens per question
(MiniLM tokens of the passages that reach the prompt), chunks cut by the embedder (longer than its 254 word pieces),
and chunking speed (MB of text per second: the cut alone; ragopt's semantic chunker reads its sentence vectors
from the cache by then, chonkie's embeds them). For ragopt's scenarios
`check` is the largest difference between ragopt's own chars_* metrics and this scorer's (they should agree).

Usage: python benchmarks/bench_chunking.py [--dataset DIR] [--workspace DIR] [--k 5] [--only SUBSTRING,...] [--json]
Torch uses one thread; the workspace keeps indexes and embeddings, so a re-run is fast.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, NoReturn

REPO = Path(__file__).resolve().parents[1]
CHROMA_SEPARATORS = ["\n\n", "\n", ".", "?", "!", " ", ""]
LANGCHAIN = [(200, 0), (400, 0), (400, 200), (800, 400), (250, 125)]
EMBEDDER_READS = 254  # MiniLM's 256 positions less [CLS] and [SEP]
# ragopt's scenarios: (id, chunker settings, retriever, small_to_big settings or None)
RAGOPT: list[tuple[str, dict[str, Any], str, dict[str, Any] | None]] = [
    (f"ragopt {chunker} {size}/{overlap}" + (f" {retriever}" if retriever != "dense" else "") + (f" + {window} {tokens}" if window else ""),
     {"chunker": chunker, "size": size, **({"overlap": overlap} if chunker != "semantic" else {"min_size": size // 4})}, retriever,
     {"window": window, "window_tokens": tokens} if window else None)
    for chunker, size, overlap, retriever, window, tokens in [(c, s, 0, r, w, t) for c, s, r, w, t in [
        ("tokens", 200, "dense", None, 0), ("tokens", 64, "dense", None, 0), ("tokens", 32, "dense", None, 0),
        ("tokens", 64, "dense", "chunks", 192), ("tokens", 64, "dense", "sentences", 128),
        ("tokens", 64, "dense", "sentences", 160), ("tokens", 64, "dense", "sentences", 192),
        ("tokens", 64, "dense", "sentences", 256), ("tokens", 64, "dense", "sentences", 288),
        ("tokens", 32, "dense", "sentences", 96), ("tokens", 32, "dense", "sentences", 128),
        ("tokens", 32, "dense", "sentences", 160), ("tokens", 32, "dense", "sentences", 224),
        ("tokens", 48, "dense", "sentences", 128),
        ("recursive", 200, "dense", None, 0), ("recursive", 64, "dense", None, 0),
        ("recursive", 64, "dense", "sentences", 192), ("recursive", 64, "dense", "sentences", 256),
        ("semantic", 200, "dense", None, 0), ("semantic", 64, "dense", "sentences", 192),
        ("tokens", 64, "bm25", None, 0), ("tokens", 64, "bm25", "sentences", 192), ("tokens", 32, "bm25", "sentences", 192),
        ("tokens", 64, "bm25", "sentences", 256), ("tokens", 64, "hybrid", "sentences", 192),
        ("tokens", 64, "hybrid", "sentences", 256), ("tokens", 64, "hybrid", "sentences", 288),
        ("tokens", 32, "hybrid", "sentences", 224),
    ]] + [("tokens", 64, 32, "dense", "sentences", 256), ("tokens", 64, 32, "dense", "sentences", 320),
          ("tokens", 96, 0, "dense", "sentences", 256), ("tokens", 64, 32, "hybrid", "sentences", 256),
          ("tokens", 64, 32, "hybrid", "sentences", 320)]
] + [  # windows that follow the query: a sentence joins where its cosine to the query reaches the threshold
    (f"ragopt tokens 64/0{'' if retriever == 'dense' else ' ' + retriever} + query sentences up to {tokens} "
     f"(cos>={low}, gap {gap}{', hit trimmed' if trim else ''})",
     {"chunker": "tokens", "size": 64, "overlap": 0}, retriever,
     {"window": "sentences", "window_tokens": tokens, "min_query_similarity": low, "max_gap_sentences": gap,
      "trim_hits": trim})
    for retriever, tokens, low, gap, trim in [
        ("dense", 256, 0.3, 1, True), ("dense", 256, 0.36, 2, True), ("dense", 192, 0.3, 1, True),
        ("dense", 320, 0.25, 3, False), ("dense", 448, 0.25, 2, False), ("dense", 448, 0.2, 3, False),
        ("hybrid", 256, 0.3, 1, True), ("hybrid", 320, 0.25, 3, False), ("hybrid", 448, 0.25, 2, False),
        ("hybrid", 448, 0.2, 3, False)]
]


def default_dataset() -> Path:
    for root in (REPO.parent, REPO.parents[1]):
        if (root / "shared" / "data" / "chroma_chunking").is_dir():
            return root / "shared" / "data" / "chroma_chunking"
    return REPO.parent / "shared" / "data" / "chroma_chunking"


def bad_input(message: str) -> NoReturn:
    """One line naming the flag or file, exit 2, as every ragopt command does with bad input."""
    print(f"bench_chunking: {message}", file=sys.stderr)
    raise SystemExit(2)


def locate(text: str, pieces: list[str]) -> list[tuple[int, int]]:
    """Each piece's (start, end) in `text`, found in order: a piece starts after the previous one's start."""
    out, at = [], 0
    for piece in pieces:
        start = text.find(piece, at)
        if start < 0:
            raise ValueError(f"a chunk is not in the text after offset {at}: {piece[:60]!r}")
        out.append((start, start + len(piece)))
        at = start + 1
    return out


def chroma_scores(passages: list[tuple[str, int, int]], evidence: list[tuple[str, int, int]], k: int) -> tuple[float, float, float]:
    """Chroma's recall, precision and IoU in characters of the first k passages (sets of (doc, offset) pairs)."""
    gold = {(doc, i) for doc, s, e in evidence for i in range(s, e)}
    top = passages[:k]
    seen = {(doc, i) for doc, s, e in top for i in range(s, e)}
    covered = len(gold & seen)
    retrieved = sum(e - s for _, s, e in top)
    return covered / len(gold), covered / retrieved if retrieved else 0.0, covered / (retrieved + len(gold) - covered)


def summarize(scenario: str, runs: dict[str, list[tuple[str, int, int]]], evidence: dict[str, list[tuple[str, int, int]]],
              texts: dict[str, str], count: Callable[[str], int], k: int) -> dict[str, Any]:
    """The scenario's means over the questions with evidence spans."""
    scored = [chroma_scores(runs[q], ev, k) for q, ev in evidence.items()]
    tokens = [sum(count(texts[d][s:e]) for d, s, e in runs[q][:k]) for q in evidence]
    n = len(scored)
    return {"scenario": scenario, "recall": sum(s[0] for s in scored) / n, "precision": sum(s[1] for s in scored) / n,
            "iou": sum(s[2] for s in scored) / n, "context_tokens": sum(tokens) / n}


def dense_top(spans: list[tuple[str, int, int]], texts: dict[str, str], queries: dict[str, str], embedder: Any,
              k: int) -> dict[str, list[tuple[str, int, int]]]:
    """Exact cosine top k over one pool of chunks (MiniLM vectors are normalized), ties by chunk (doc, start, end)."""
    chunk_vectors = embedder.encode([texts[d][s:e] for d, s, e in spans]).vectors
    qids = list(queries)
    scores = embedder.encode([queries[q] for q in qids], role="query").vectors @ chunk_vectors.T
    return {qid: [spans[i] for i in sorted(range(len(spans)), key=lambda i: (-float(row[i]), spans[i]))[:k]]
            for qid, row in zip(qids, scores)}


def langchain_chunks(docs: dict[str, str], size: int, overlap: int, count: Callable[[str], int]) -> tuple[list[tuple[str, int, int]], float]:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=overlap, length_function=count,
                                              separators=CHROMA_SEPARATORS, is_separator_regex=False)
    t0 = time.perf_counter()
    spans = [(d, s, e) for d, text in docs.items() for s, e in locate(text, splitter.split_text(text))]
    return spans, time.perf_counter() - t0


def chonkie_chunks(docs: dict[str, str], kind: str, size: int, count: Callable[[str], int],
                   model_path: str) -> tuple[list[tuple[str, int, int]], float]:
    """chonkie's recursive or semantic chunks, by the offsets chonkie gives (checked against the text)."""
    import chonkie

    if kind == "recursive":
        chunker = chonkie.RecursiveChunker(tokenizer=count, chunk_size=size)
    else:
        chunker = chonkie.SemanticChunker(embedding_model=model_path, chunk_size=size)
    t0 = time.perf_counter()
    spans = [(d, c.start_index, c.end_index) for d, text in docs.items() for c in chunker.chunk(text)]
    seconds = time.perf_counter() - t0
    for d, s, e in spans[:50]:
        assert docs[d][s:e].strip(), (d, s, e)
    return spans, seconds


def ragopt_run(documents: list[Any], evalset: Any, chunker: dict[str, Any], retriever: str, widen: dict[str, Any] | None,
               workspace: Path, k: int) -> dict[str, Any]:
    """ragopt's plan at K: its passages per question, chunking seconds, its chunks' spans and its own chars_* means."""
    from ragopt.chunking import Chunker
    from ragopt.config import ChunkerConfig, RetrievalConfig
    from ragopt.eval.executor import run_trial
    from ragopt.eval.metrics import evaluate_chars, mean
    from ragopt.plan import PlanConfig, build_or_reuse_index, pipeline_for

    config = ChunkerConfig(**chunker)
    stages: dict[str, dict[str, Any]] = {"prompt": {"max_passage_chars": None}}  # the prompt cuts nothing here
    if widen:
        stages["small_to_big"] = widen
    plan = PlanConfig(chunker=config, retrieval=RetrievalConfig(retriever=retriever, top_k=k), stages=stages)
    report, embedder = build_or_reuse_index(plan, documents, workspace, progress=False)
    t0 = time.perf_counter()  # the cut alone, again (the semantic chunker's sentence vectors are cached by now)
    Chunker(config, embedder=embedder).chunk_all(documents)
    seconds = time.perf_counter() - t0
    outcomes, _ = run_trial(pipeline_for(plan, report.index, embedder, workspace), [q.query for q in evalset.queries])
    runs = {o.query_id: [(d, s, e) for _, d, s, e, _ in o.ranking] for o in outcomes}
    evidence = {q.query.id: q.evidence for q in evalset.queries if any(e.start is not None for e in q.evidence)}
    own = {n.split("@")[0]: mean(v) for n, v in evaluate_chars(runs, evidence, [k]).items()}
    chunks = [(c.doc_id, c.start, c.end) for c in report.index.chunks]
    return {"runs": runs, "seconds": seconds, "own": own, "chunks": chunks}


def scenarios(args: argparse.Namespace) -> list[str]:
    names = [f"langchain {s}/{o}" for s, o in LANGCHAIN] + ["chonkie recursive 200", "chonkie semantic 200"]
    names += [name for name, *_ in RAGOPT]
    wanted = [w.strip() for w in (args.only or "").split(",") if w.strip()]
    chosen = [n for n in names if not wanted or any(w in n for w in wanted)]
    if not chosen:
        bad_input(f"[--only]: no scenario matches {args.only!r}; scenarios: {', '.join(names)}")
    return chosen


def run_one(name: str, data: dict[str, Any], embedder: Any, workspace: Path, k: int) -> dict[str, Any]:
    """One scenario: its chunks, its passages at K, its scores and its costs."""
    texts, count = data["texts"], data["count"]
    own = None
    if name.startswith("langchain"):
        size, overlap = map(int, name.split()[1].split("/"))
        chunks, seconds = langchain_chunks(texts, size, overlap, data["cut_count"])
        runs = dense_top(chunks, texts, data["queries"], embedder, k)
    elif name.startswith("chonkie"):
        chunks, seconds = chonkie_chunks(texts, name.split()[1], int(name.split()[2]), data["cut_count"], data["model_path"])
        runs = dense_top(chunks, texts, data["queries"], embedder, k)
    else:
        _, chunker, retriever, widen = next(spec for spec in RAGOPT if spec[0] == name)
        out = ragopt_run(data["documents"], data["evalset"], chunker, retriever, widen, workspace, k)
        chunks, seconds, runs, own = out["chunks"], out["seconds"], out["runs"], out["own"]
    row = summarize(name, runs, data["evidence"], texts, count, k)
    row["chunks"] = len(chunks)
    row["cut_by_embedder"] = sum(count(texts[d][s:e]) > EMBEDDER_READS for d, s, e in chunks) / len(chunks)
    row["mb_per_s"] = sum(len(t.encode()) for t in texts.values()) / 1e6 / seconds if seconds > 0 else None
    row["check"] = None if own is None else max(abs(own[m] - row[m.removeprefix("chars_")]) for m in own)
    return row


def load(dataset: str, workspace: Path) -> tuple[dict[str, Any], Any]:
    from ragopt.config import EmbedderConfig
    from ragopt.data import load_evalset
    from ragopt.index import make_embedder
    from ragopt.tokencount import token_counter

    evalset = load_evalset(dataset)
    evidence = {q.query.id: [(e.doc_id, e.start, e.end) for e in q.evidence if e.start is not None]
                for q in evalset.queries}
    evidence = {q: ev for q, ev in evidence.items() if ev}
    if not evidence:
        raise ValueError("no question has evidence spans (character offsets): nothing to score")
    counter = token_counter("embedder", EmbedderConfig())
    embedder = make_embedder(workspace, EmbedderConfig())
    data = {"evalset": evalset, "documents": evalset.documents, "texts": {d.id: d.text for d in evalset.documents},
            "queries": {q.query.id: q.query.text for q in evalset.queries}, "evidence": evidence, "count": counter.count,
            # the chunkers' length function counts afresh: the counter remembers texts, which would time a later
            # scenario's cut on the earlier ones' counts
            "cut_count": lambda text: len(counter.tokenize(text)), "model_path": embedder.path}
    return data, embedder


def print_table(rows: list[dict[str, Any]], k: int) -> None:
    print(f"| scenario | chars recall@{k} | chars precision@{k} | chars IoU@{k} | context tokens | chunks | cut by embedder "
          "| chunking MB/s | check |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        speed = "" if r["mb_per_s"] is None else f"{r['mb_per_s']:.2f}"
        check = "" if r["check"] is None else f"{r['check']:.4f}"
        print(f"| {r['scenario']} | {r['recall']:.3f} | {r['precision']:.4f} | {r['iou']:.4f} | {r['context_tokens']:,.0f} "
              f"| {r['chunks']:,} | {r['cut_by_embedder']:.0%} | {speed} | {check} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(default_dataset()), help="a ragopt evaluation set with evidence spans")
    parser.add_argument("--workspace", default=str(Path(tempfile.gettempdir()) / "ragopt-bench-chunking"))
    parser.add_argument("--k", type=int, default=5, help="passages per question (default 5)")
    parser.add_argument("--only", help="comma-separated substrings: run the scenarios whose names hold one")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args()
    if args.k <= 0:
        bad_input(f"[--k]: a positive number of passages, got {args.k}")
    chosen = scenarios(args)

    import torch

    torch.set_num_threads(1)
    from ragopt.errors import InputError

    workspace = Path(args.workspace)
    try:
        data, embedder = load(args.dataset, workspace)
    except (InputError, ValueError) as exc:
        bad_input(f"[--dataset] {args.dataset}: {exc}")
    rows = []
    for name in chosen:
        t0 = time.perf_counter()
        rows.append(run_one(name, data, embedder, workspace, args.k))
        r = rows[-1]  # progress, beside the table or JSON
        print(f"{name}: recall {r['recall']:.3f} IoU {r['iou']:.4f} tokens {r['context_tokens']:.0f} "
              f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    if args.json:
        print(json.dumps({"dataset": args.dataset, "k": args.k, "questions": len(data["evidence"]), "rows": rows}))
        return
    print(f"{args.dataset}: {len(data['evidence'])} questions with evidence spans, K = {args.k}")
    print_table(rows, args.k)


if __name__ == "__main__":
    main()
