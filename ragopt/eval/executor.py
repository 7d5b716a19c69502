"""Runs one configuration's pipeline over an evaluation set: what `ragopt eval` and every sweep trial share.

Latency means the same everywhere: a query's latency is the sum of its stages' spans (each measured by the
pipeline core around the stage alone), and a stage's p50/p95 come from those spans. A stage that a memo
(ragopt.memo) had already run on the same inputs contributes the span measured then.

A whole trial's outcomes are also kept on disk, keyed by every stage's identity, the queries and the
measuring context (code, library versions, machine), so a warm re-run of an unchanged sweep in a fresh
process reads them back without building a stage.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator, Sequence

from ragopt.cache import Cache, CacheKey
from ragopt.config import fingerprint
from ragopt.memo import stage_identity
from ragopt.pipeline import Pipeline, Step
from ragopt.types import Answer, Query, is_live

NAMESPACE = "trial-outcomes-2"  # -2: an outcome keeps the backend its question was routed to


@dataclass
class QueryOutcome:
    query_id: str
    ranking: list[tuple[str, str, int, int, float]]  # (chunk id, doc id, start, end, score) of the hits, best first
    stage_ms: dict[str, float]  # span name -> ms
    prompt_tokens: int | None = None  # the fitted prompt as the generator receives it
    prompt_fingerprint: str | None = None  # sha256 of that prompt's text (serve's trace carries the same)
    answer: dict[str, Any] | None = None  # Answer as JSON
    degraded: list[str] = field(default_factory=list)
    route: str | None = None  # the backend a routing stage sent the question to ("small", "default"); None: no routing
    live: bool = False  # a tool's live data reached its prompt or answer: nothing made from it is remembered
    from_earlier_run: bool = False  # some span was measured by an earlier process
    trace: Any = None  # the request's Trace (not kept on disk)

    @property
    def ms(self) -> float:
        return sum(self.stage_ms.values())

    def answer_model(self) -> Answer | None:
        return None if self.answer is None else Answer.model_validate(self.answer)


# Libraries whose versions can change a ranking, an answer or a timing.
RANKING_PACKAGES = ("numpy", "bm25s", "rank-bm25", "PyStemmer", "qdrant-client", "sentence-transformers", "torch",
                    "transformers", "tokenizers", "llama-cpp-python")
# ragopt's own code that cannot change what a stage returns or how long it takes (prefixes: eval/report covers
# report.py and its report_*.py modules; the judges score answers after the stages ran).
_PRESENTATION = ("cli/", "eval/report", "eval/results.py", "eval/gates.py", "eval/bootstrap.py", "judge/",
                 "eval/judged.py")


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A hash of ragopt's source (less its presentation code): editing a tokenizer, BM25 or a store changes it."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(_PRESENTATION):
            continue
        digest.update(rel.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def machine_identity() -> dict[str, Any]:
    """What a latency depends on besides the code: the host, its processor and the threads in use."""
    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {"host": platform.node(), "machine": platform.machine(), "cpu": cpu, "cores": os.cpu_count()}


def measuring_context(threads: int | None = None) -> dict[str, Any]:
    """Part of every remembered stage output and trial outcome key."""
    versions = {}
    for name in RANKING_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {"code": code_fingerprint(), "packages": versions, "machine": machine_identity(), "threads": threads}


def pipeline_identity(steps: Sequence[Step]) -> list[Any] | None:
    """Every stage's identity in order (fallbacks too), or None when a stage cannot be identified."""
    out = []
    for step in steps:
        for stage in (step.stage, step.fallback):
            if stage is None:
                continue
            ident = stage_identity(stage)
            if ident is None:
                return None
            out.append(ident)
    return out


def _outcome(query: Query, result: Any) -> QueryOutcome:
    stage_ms: dict[str, float] = {}
    prompt_tokens = None
    from_disk = False
    for span in result.trace.spans:
        if span.skipped:
            continue
        stage_ms[span.name] = stage_ms.get(span.name, 0.0) + span.ms
        if span.usage.attrs.get("prompt_tokens") is not None:
            prompt_tokens = int(span.usage.attrs["prompt_tokens"])
        from_disk |= span.usage.attrs.get("memo") == "disk"
    answer = result.state.answer
    return QueryOutcome(
        query_id=query.id,
        ranking=[(h.chunk.id, h.chunk.doc_id, h.chunk.start, h.chunk.end, h.score) for h in result.state.hits
                 if not is_live(h.chunk)],  # documents only: a tool's live passage is no retrieval result
        stage_ms=stage_ms,
        prompt_tokens=prompt_tokens,
        prompt_fingerprint=result.state.prompt.fingerprint if result.state.prompt is not None else None,
        answer=None if answer is None else answer.model_dump(mode="json"),
        degraded=list(result.trace.degraded),
        route=result.trace.route,
        live=any(is_live(h.chunk) for h in result.state.hits),
        from_earlier_run=from_disk,
        trace=result.trace,
    )


def run_trial(
    pipeline: Pipeline,
    queries: Sequence[Query],
    *,
    cache: Cache | None = None,
    context: Any = None,
    progress: bool = False,
    desc: str = "queries",
) -> tuple[list[QueryOutcome], bool]:
    """Every query through `pipeline`; returns the outcomes and whether they were read back from an
    earlier run (then no stage ran). With `cache`, complete outcomes are stored for the next run."""
    from ragopt.progress import progress_bar

    ident = pipeline_identity(pipeline.steps)

    def run(_: list[int]) -> Iterator[tuple[int, list[QueryOutcome]]]:
        outcomes = [_outcome(q, pipeline.run(q)) for q in progress_bar(queries, desc=desc, unit="query", disable=not progress, leave=False)]
        if pipeline.memo is not None:
            pipeline.memo.flush()
        yield 0, outcomes

    if cache is None or ident is None:
        return next(run([0]))[1], False
    key = CacheKey(namespace=NAMESPACE, payload=fingerprint(
        {"pipeline": ident, "queries": [q.model_dump(mode="json") for q in queries], "context": context}
    ))
    found = cache.get_or_compute(
        [key], run,
        # only complete outcomes are kept for the next run, without their traces
        encode=lambda outcomes: None if any(o.degraded for o in outcomes)
        else [{k: v for k, v in o.__dict__.items() if k != "trace"} for o in outcomes],
        decode=lambda stored: [QueryOutcome(**{**o, "ranking": [tuple(r) for r in o["ranking"]], "from_earlier_run": True})
                               for o in stored])
    return found.values[0], found.cache_hits == 1
