"""Draw, filter and keep generated questions; write the set. See ragopt/synth/__init__.py."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any, Iterator, Sequence

from ragopt.config import ChunkerConfig, needs_vectors
from ragopt.data import EvalQuery, EvalSet, Evidence
from ragopt.errors import InputError
from ragopt.synth import SYNTH_FILE, SynthConfig
from ragopt.synth.extractive import Candidate
from ragopt.synth.filters import Askers, Filters, ordered, round_trip_check, searcher
from ragopt.types import Document, Query

ROUND_TRIP_CHUNKER = ChunkerConfig(chunker="whole")


def _generator_class(config: SynthConfig) -> Any:
    if config.generator == "llm":
        from ragopt.synth.llm import LlmQuestionGenerator

        return LlmQuestionGenerator
    if config.like:
        from ragopt.synth.like import StyledQuestionGenerator

        return StyledQuestionGenerator
    from ragopt.synth.extractive import ExtractiveQuestionGenerator

    return ExtractiveQuestionGenerator


def _generator(documents: Sequence[Document], embedder: Any, config: SynthConfig, workspace: Path) -> Any:
    made = _generator_class(config)
    if config.generator == "llm":
        return made(documents, config, workspace, embedder.resources)
    return made(documents, embedder, config, workspace)


def candidates(documents: Sequence[Document], generator: Any, config: SynthConfig) -> Iterator[Candidate]:
    """Round r offers every document's r-th sentence (sentences shuffled per document by the seed), in the
    seed's document order: a few rounds past the per-document cap leave room for what the filters drop."""
    order = ordered(documents, config.seed)
    spans = {}
    for d in order:
        s = generator.sentences(d)
        random.Random(f"{config.seed}\x1f{d.id}").shuffle(s)
        spans[d.id] = s
    for r in range(config.per_document_cap + 2):
        for d in order:
            if r < len(spans[d.id]):
                c = generator.candidate(d, spans[d.id][r], random.Random(f"{config.seed}\x1f{d.id}\x1f{r}"))
                if c is not None:
                    yield c


def synthesize(documents: Sequence[Document], config: SynthConfig, workspace: Path, *, name: str = "synth",
               source: str = "", progress: bool = False) -> tuple[EvalSet, dict[str, Any]]:
    """The generated set and its synth.json record."""
    from ragopt.progress import progress_bar

    from ragopt.index import build_index, make_embedder

    embedder = make_embedder(workspace)
    generator = _generator(documents, embedder, config, workspace)
    round_trip, askers = None, Askers(documents, config.seed)
    docs = {d.id: d for d in documents}
    rt = config.round_trip
    if rt.enabled or config.like:
        report = build_index(documents, ROUND_TRIP_CHUNKER, embedder, workspace, dense=needs_vectors(rt.retriever),
                             progress=progress)
        round_trip = round_trip_check(report.index, embedder, config, askers) if rt.enabled else None
        if config.like:
            from ragopt.synth.like import Retrieval

            generator.learn(config.like, Retrieval(searcher(report.index, embedder, askers, docs, rt.retriever), docs))
    filters = Filters(config, docs, round_trip)
    kept: list[Candidate] = []
    seen = 0
    with progress_bar(total=config.questions, desc="generating questions", unit="q", disable=not progress) as bar:
        for c in candidates(documents, generator, config):
            seen += 1
            if filters.admit(c):
                kept.append(c)
                bar.update()
                if len(kept) == config.questions:
                    break
    if not kept:
        raise InputError(f"no generated question passed the filters ({dict(filters.dropped)})", field="--docs")
    queries = []
    for i, c in enumerate(kept, start=1):
        tenant, scopes = askers(docs[c.doc_id])
        queries.append(EvalQuery(query=Query(id=f"synth-{i:05d}", text=c.question, tenant=tenant, scopes=scopes),
                                 relevance={c.doc_id: 1}, evidence=[Evidence(doc_id=c.doc_id, start=c.start, end=c.end)],
                                 reference_answer=c.answer))
    record = {
        "generated": True,
        "generator": config.generator,
        "model_fingerprint": generator.model_fingerprint,
        "prompt_version": generator.prompt_version,
        "seed": config.seed,
        "config": config.model_dump(mode="json", exclude={"like"}),
        "filters": {"round_trip": {**rt.model_dump(mode="json"), "chunker": ROUND_TRIP_CHUNKER.label},
                    "per_document_cap": config.per_document_cap, "duplicate_jaccard": config.duplicate_jaccard},
        "source": source,
        "documents": len(documents),
        **({"like": generator.style.summary()} if config.like else {}),
        "counts": {"candidates": seen, "kept": len(kept), "dropped": dict(filters.dropped)},
    }
    if len(kept) < config.questions:
        record["short_by"] = config.questions - len(kept)
    return EvalSet(name=name, source=source, documents=list(documents), queries=queries), record


def check_out(out: Path) -> None:
    """SET may be new, or a generated set (replaced); anything else is never overwritten."""
    if out.exists() and not (out / SYNTH_FILE).is_file() and (not out.is_dir() or any(out.iterdir())):
        raise InputError("exists and is not a generated set (no synth.json): choose another --out", path=out, field="--out")
    if not out.parent.is_dir():
        raise InputError("its folder does not exist", path=out, field="--out")


def write_set(evalset: EvalSet, record: dict[str, Any], out: Path) -> Path:
    """Publish SET in one rename: a killed run leaves no half set (and removes its own scratch next time)."""
    from ragopt.data.jsonl import dump_ragopt_jsonl
    from ragopt.workspace import remove_stale_scratch, scratch_name

    check_out(out)
    remove_stale_scratch(out.parent, f".{out.name}.tmp")
    tmp = out.parent / scratch_name(f".{out.name}.tmp")
    dump_ragopt_jsonl(evalset, tmp)
    (tmp / SYNTH_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if out.exists():
        shutil.rmtree(out)
    os.rename(tmp, out)
    return out


def cached_set(documents: Sequence[Document], config: SynthConfig, workspace: Path, *, source: str = "",
               progress: bool = False) -> tuple[Path, dict[str, Any], bool]:
    """A generated set for these documents and settings, kept in the workspace: (its folder, its synth.json
    record, whether it was reused). `sweep --docs` and `eval --docs` start from it."""
    from ragopt.config import fingerprint
    from ragopt.index import corpus_fingerprint

    # the generator's version too: a changed generator makes a new set, never reuses the old one
    key = fingerprint([corpus_fingerprint(documents), config.model_dump(mode="json"), _generator_class(config).prompt_version])
    out = workspace / "synth" / "sets" / key
    if (out / SYNTH_FILE).is_file():
        return out, json.loads((out / SYNTH_FILE).read_text(encoding="utf-8")), True
    out.parent.mkdir(parents=True, exist_ok=True)
    evalset, record = synthesize(documents, config, workspace, name=f"generated-{key[:8]}", source=source, progress=progress)
    return write_set(evalset, record, out), record, False
