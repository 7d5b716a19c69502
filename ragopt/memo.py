"""Stage outputs remembered by what the stage read, so a sweep never runs the same work twice.

A stage run is identified by the stage (its class, name and config, see `stage_identity`), the fields it
declares it reads, the request's query (permissions included) and a context that the caller gives: the code
and library versions that rank, and the machine that measured (a latency from another machine is not this
one's). A stage that ran before on the same identity gives back what it wrote and the span it was measured
with: its latency is the one measured then, and `Span.usage.attrs["memo"]` says where the span came from.

Hits are keyed by (chunk id, rank, text) and, for stages that write hits themselves, by score too: stages
after retrieval use the order of the passages, not their scores, so an answer computed from the same
passages is shared by every retrieval variant that retrieved them ("answers are cached by their passages").
A candidate list a remembered stage run wrote (a retriever's hundred candidates before fusion) is keyed by that
run's key instead, as long as the request holds that very list: the same key means the same list.

Entries live in memory for this process (decoded, so a restore costs no decoding) and, when a `Cache` is given,
in it for the next one (written in one transaction per trial by `flush`; hit accounting is the Cache's), if the
run wrote an answer or took at least `disk_min_ms` (DISK_MIN_MS): a quicker one is run again sooner than it is
written and read back (on the main job an entry cost 0.2 ms to encode and write, and 38,890 of them, nearly all
under a millisecond, were 12% of a cold sweep's time). Answers always are: an answer is what a sweep pays for,
and a raced sweep widened later counts on its answers (ragopt.eval.race). A state holding a fitted prompt is kept
in memory only (prompt assembly is cheap to redo). It is not a get_or_compute: the computation is the pipeline
running the stage between `restore` and `store`.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from ragopt.cache import Cache, CacheKey
from ragopt.config import PerObject, canonical_json, fingerprint
from ragopt.trace import Span, Trace, now_ms
from ragopt.types import Chunk, Hit, is_live

DISK_MIN_MS = 1.0  # the quickest stage run worth writing to disk (module docstring)
NAMESPACE = "stage-memo-3"  # -3: keyed by the stage's hash and the inputs (-2: a remembered span carries its kind)


def stage_identity(stage: Any) -> Any:
    """What decides a stage's output besides its inputs: `stage.identity()` when it defines one, else its
    class, name and config. None (no config, no identity) means the stage is not remembered."""
    ident = getattr(stage, "identity", None)
    if callable(ident):
        return ident()
    config = getattr(stage, "config", None)
    if config is None or not hasattr(config, "model_dump"):
        return None
    return {"class": f"{type(stage).__module__}.{type(stage).__qualname__}", "name": stage.name,
            "config": config.model_dump(mode="json")}


@lru_cache(maxsize=1 << 16)  # a sweep keys the same chunks' texts at every stage of every trial
def _text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _hits_key(hits: list[Hit], with_scores: bool) -> str:
    """Each hit's chunk id (length-prefixed, so no id can run into the next field), rank, text hash and, when
    `with_scores`, score: one string, cheap to build for every stage of every trial."""
    if with_scores:
        return "".join(f"{len(h.chunk.id)}:{h.chunk.id},{h.rank},{_text_hash(h.chunk.text)},{round(h.score, 6)!r};" for h in hits)
    return "".join(f"{len(h.chunk.id)}:{h.chunk.id},{h.rank},{_text_hash(h.chunk.text)};" for h in hits)


def _field_key(state: Any, name: str, with_scores: bool) -> str:
    """One field a stage reads, as a string that tells every value apart (None included)."""
    if name == "query":
        return _query_key(state.query)
    if name == "query_vector":
        vec = state.query_vector
        return "-" if vec is None else hashlib.blake2b(np.asarray(vec, dtype=np.float32).tobytes(), digest_size=8).hexdigest()
    if name.startswith("candidates."):
        hits = state.candidates.get(name.split(".", 1)[1], [])
        made = state.lineage.get(name)
        if made is not None and made[1] is hits:  # a remembered run's own output: its key says what it holds
            return "@" + made[0]
        return _hits_key(hits, with_scores)
    if name == "hits":
        return _hits_key(state.hits, with_scores)
    if name == "prompt":
        return "-" if state.prompt is None else "+" + state.prompt.text
    if name == "answer":
        return "-" if state.answer is None else "+" + canonical_json(state.answer.model_dump(mode="json")).decode()
    raise ValueError(f"unknown state field {name!r}")


# every stage of every trial reads the same few hundred queries; a query is never changed in place (a rewriting
# stage writes a new one)
_query_key = PerObject(lambda query: canonical_json(query.model_dump(mode="json", exclude={"id"})).decode())


def _note_lineage(key: str, stage: Any, state: Any) -> None:
    """The candidate lists the stage run `key` wrote, each with that key: a fusion reads hundreds of candidates, and
    keying them by the run that made them costs nothing."""
    for name in stage.writes:
        if name.startswith("candidates."):
            state.lineage[name] = (key, state.candidates.get(name.split(".", 1)[1]))


def _copy_span(span: Span) -> Span:
    """A span to remember or to restore: its usage and attrs its own, their values shared (never changed later)."""
    return span.model_copy(update={"usage": span.usage.model_copy(update={"attrs": dict(span.usage.attrs)})})


def _read(state: Any, name: str) -> Any:
    if name.startswith("candidates."):
        return list(state.candidates.get(name.split(".", 1)[1], []))
    value = getattr(state, name)
    return list(value) if isinstance(value, list) else value


def _write(state: Any, name: str, value: Any) -> None:
    if name.startswith("candidates."):
        state.candidates[name.split(".", 1)[1]] = list(value)
    else:
        setattr(state, name, list(value) if isinstance(value, list) else value)


class StageMemo:
    """`Pipeline(stages, memo=StageMemo(cache, context))`: see the module docstring."""

    def __init__(self, cache: Cache | None = None, context: Any = None, chunk_of: Callable[[str], Chunk] | None = None,
                 disk_min_ms: float = DISK_MIN_MS):
        self.cache = cache
        self.disk_min_ms = disk_min_ms
        self.context = context
        self.chunk_of = chunk_of  # resolves chunk ids when reading hits back from disk
        self._memory: dict[str, tuple[dict[str, Any], Span]] = {}
        self._pending: list[tuple[CacheKey, Any]] = []
        # what the disk held when the sweep began: a cold sweep's lookups are nearly all misses, and asking the
        # store for each costs more than the stage it would save (an entry another process writes later is missed:
        # recomputed, never wrong)
        self._on_disk = cache.stored_digests(NAMESPACE) if cache is not None else set()
        self._stage_part = PerObject(self._stage_part_of)  # a memo serves one sweep, whose stages never change

    def key(self, stage: Any, state: Any) -> str | None:
        if state.deadline is not None:  # a deadline makes the output depend on time
            return None
        part = self._stage_part(stage)
        if part is None:
            return None
        stage_key, reads, with_scores, reads_results = part
        if reads_results and any(is_live(h.chunk) for h in state.hits):  # live data is never cached, nor anything made from it
            return None
        fields = [_field_key(state, name, with_scores) for name in reads]
        return hashlib.sha256("".join([stage_key, *(f"{len(f)}:{f}" for f in fields)]).encode()).hexdigest()[:16]

    def _stage_part_of(self, stage: Any) -> tuple[str, list[str], bool, bool] | None:
        """What a stage's keys share: the hash of its identity, writes and the context; the fields it reads
        (sorted); whether hits' scores count; whether it reads what earlier stages made (else nothing live can
        reach its output: a retriever reads the query alone). None: the stage is not remembered."""
        identity = stage_identity(stage)
        if identity is None:
            return None
        with_scores = any(w == "hits" or w.startswith("candidates.") for w in stage.writes)
        reads = sorted(set(stage.reads) | {"query"})  # permissions always decide what a stage may see
        return (fingerprint({"stage": identity, "writes": list(stage.writes), "context": self.context}), reads, with_scores,
                bool(set(reads) - {"query", "query_vector"}))

    def restore(self, key: str, stage: Any, state: Any, trace: Trace, t0: float) -> bool:
        """Apply a remembered run's writes to `state` and its span to `trace`; False when there is none."""
        found = self._memory.get(key)
        source = "memory"
        disk_key = self._disk_key(key) if found is None and self._on_disk else None
        if disk_key is not None and self.cache is not None and disk_key.digest() in self._on_disk:
            stored = self.cache.get(disk_key)
            if stored is not None:
                found = self._decode(stored)
                self._memory[key] = found
                source = "disk"
        if found is None:
            return False
        writes, span = found
        for name, value in writes.items():
            _write(state, name, value)
        _note_lineage(key, stage, state)
        restored = _copy_span(span)
        restored.start_ms = now_ms() - t0
        restored.usage.attrs["memo"] = source
        trace.spans.append(restored)
        return True

    def store(self, key: str, stage: Any, state: Any, span: Span) -> None:
        _note_lineage(key, stage, state)
        if span.error is not None or (state.answer is not None and state.answer.incomplete):
            return
        writes = {name: _read(state, name) for name in stage.writes}
        kept = _copy_span(span)
        self._memory[key] = (writes, kept)
        if self.cache is not None and "prompt" not in writes and (span.ms >= self.disk_min_ms or "answer" in writes):
            self._pending.append((self._disk_key(key), self._encode(writes, kept)))

    def flush(self) -> None:
        """Write what this process learned to disk in one transaction."""
        if self.cache is not None and self._pending:
            self.cache.set_many(self._pending)
        self._pending = []

    @staticmethod
    def _disk_key(key: str) -> CacheKey:
        return CacheKey(namespace=NAMESPACE, payload=key)

    def _encode(self, writes: dict[str, Any], span: Span) -> dict[str, Any]:
        """Hits as (chunk id, score, rank, retriever, text when it differs from the indexed chunk's)."""
        out: dict[str, Any] = {}
        for name, value in writes.items():
            if name == "hits" or name.startswith("candidates."):
                out[name] = ("hits", self._encode_hits(value))
            elif hasattr(value, "model_dump"):
                out[name] = ("model", type(value).__module__, type(value).__qualname__, value.model_dump(mode="json"))
            else:
                out[name] = ("raw", value)
        return {"writes": out, "span": span.model_dump(mode="json")}

    def _encode_hits(self, hits: list[Hit]) -> list[tuple[Any, ...]]:
        chunk_of = self.chunk_of
        out = []
        for hit in hits:
            chunk = hit.chunk
            original = chunk_of(chunk.id) if chunk_of is not None else None
            same = original is not None and (original is chunk or original.text == chunk.text)
            out.append((chunk.id, hit.score, hit.rank, hit.retriever, None if same else chunk.model_dump(mode="json")))
        return out

    def _decode(self, stored: dict[str, Any]) -> tuple[dict[str, Any], Span]:
        import importlib

        writes: dict[str, Any] = {}
        for name, encoded in stored["writes"].items():
            kind = encoded[0]
            if kind == "hits":
                writes[name] = [
                    Hit(chunk=Chunk.model_validate(text) if text is not None else self.chunk_of(cid),  # type: ignore[misc]
                        score=score, rank=rank, retriever=retriever)
                    for cid, score, rank, retriever, text in encoded[1]
                ]
            elif kind == "model":
                cls = getattr(importlib.import_module(encoded[1]), encoded[2])
                writes[name] = cls.model_validate(encoded[3])
            else:
                writes[name] = encoded[1]
        return writes, Span.model_validate(stored["span"])
