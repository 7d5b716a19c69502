"""Small-to-big: retrieve small chunks (they find), hand the prompt what surrounds them (it holds).

Over the ranked hits, best first:

1. auto-merge (`merge_ratio`): where more than that share of a parent's chunks were retrieved, the parent replaces
   them, at its best child's rank (LlamaIndex's AutoMergingRetriever; strictly more, as Haystack's). A parent is a
   run of `parent_chunks` consecutive chunks of a document, counted from the start of its section (the chunks
   sharing a heading path, `metadata["headings"]`, where the chunker records one), or the whole section when
   `parent_chunks` is 0;
2. widening (`window`): `sentences` grows each passage by whole sentences of its document, `chunks` by whole
   neighbouring chunks, one after it then one before it in turn, while the passage stays within `window_tokens`
   (its own tokens included) and within the prompt's `max_passage_chars` (so the prompt never cuts what was
   widened); `parent` hands the prompt each hit's parent instead. Passages are widened in rank order within
   `budget_tokens` for all of them (None: the prompt's own budget decides), each keeping at least its own text.
   With `min_query_similarity`, sentence windows follow the query: a sentence joins only where its cosine to the
   query (the plan's embedder, each sentence's vector cached as every vector is) reaches it, stepping over at most
   `max_gap_sentences` below it to reach one that does, and (`trim_hits`) the hit's own first and last sentences
   below it are dropped, its best sentence kept: the window holds what answers, not what is near;
3. passages of one document that overlap or touch are merged (at the better rank) where the merged passage
   stays within `max_passage_chars`; otherwise the worse-ranked one loses the shared part.

Every passage is a (doc_id, start, end) slice of its document, with a deterministic id, so span and character
metrics and citations count what reaches the prompt. The document's text comes from the index's own chunks
(a character no chunk covers reads as a space: between token chunks that is whitespace, which the prompt
collapses anyway), so nothing is read again from the files. Tokens are the embedder's, as context tokens are: a
widened passage's are the sum of its parts' (its hit and each unit added, each counted once and remembered), which
is its own count where the tokenizer splits at whitespace (MiniLM's does) and the parts meet at whitespace.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Collection, Literal, Sequence

import numpy as np
from pydantic import Field

from ragopt.config import StrictModel, knob
from ragopt.pipeline import RequestState
from ragopt.stages.spec import BuildContext, StageSpec
from ragopt.text import sentence_spans
from ragopt.types import Chunk, Hit, is_live

if TYPE_CHECKING:
    from ragopt.backends.embeddings import Embedder, Owner

Span = tuple[int, int]
Similarity = Callable[[str, Sequence[Span], "Owner"], list[float]]  # (doc_id, slices, owner) -> cosines to the query
WIDENED = "small-to-big"  # the "chunker fingerprint" of a widened passage's id: the same slice, the same id


class SmallToBigConfig(StrictModel):
    window: Literal["off", "sentences", "chunks", "parent"] = knob(
        "off", sweep=["off", "sentences", "chunks"],
        description="widen each hit by whole sentences or neighbouring chunks up to window_tokens, or hand the prompt "
                    "its parent")
    window_tokens: int = knob(192, sweep=[128, 192, 256], gt=0,
                              description="a widened passage's size at most, in the embedder's tokens (its hit included)")
    parent_chunks: int = knob(4, ge=0, description="a parent's chunks, counted from its section's start; 0: the section")
    merge_ratio: float | None = knob(None, sweep=[None, 0.5], gt=0, lt=1,
                                     description="auto-merge: a parent replaces its retrieved chunks when more than this "
                                                 "share of them was retrieved; None: off")
    budget_tokens: int | None = Field(None, gt=0, description="all widened passages' tokens at most (None: the prompt's "
                                                              "budget decides)")
    min_query_similarity: float | None = knob(
        None, sweep=[None, 0.3], ge=-1, le=1,
        description="sentence windows: a sentence joins only where its cosine to the query reaches this (None: every "
                    "sentence, by size alone)")
    max_gap_sentences: int = knob(1, ge=0, description="with min_query_similarity: sentences below it a window may step "
                                                       "over to reach one at or above it")
    trim_hits: bool = knob(True, description="with min_query_similarity: drop the hit's own first and last sentences "
                                             "below it (its best sentence stays)")


@dataclass
class DocLayout:
    """One document as its index holds it: its chunks' positions in order and its text rebuilt from them."""

    positions: list[int]  # the document's chunks' positions in the index, in document order
    text: str
    _sentences: list[Span] | None = field(default=None, repr=False)

    @property
    def sentences(self) -> list[Span]:
        if self._sentences is None:
            self._sentences = sentence_spans(self.text)
        return self._sentences


class Layout:
    """Every document of an index, by its chunks: built once per index and shared by its stages (ctx.resources)."""

    def __init__(self, chunks: Sequence[Chunk]):
        self.chunks = chunks
        self.position = {c.id: i for i, c in enumerate(chunks)}
        self._by_doc: dict[str, list[int]] = {}
        for i, c in enumerate(chunks):
            self._by_doc.setdefault(c.doc_id, []).append(i)
        self._docs: dict[str, DocLayout] = {}
        # a slice's unit vector, by (doc_id, start, end): one embedder's, since a layout belongs to one index (its
        # resource key) and an index id names the embedder that built it (ragopt/index/manifest.py)
        self._vectors: dict[tuple[str, int, int], np.ndarray] = {}

    def vectors(self, doc_id: str, spans: Sequence[Span], embedder: Embedder, owner: Owner) -> list[np.ndarray]:
        """Each slice's embedding, normalized: the embedder's cache first, then this memo (shared by requests)."""
        missing = [span for span in dict.fromkeys(spans) if (doc_id, *span) not in self._vectors]
        if missing:
            text = self.doc(doc_id).text
            encoded = embedder.encode([text[s:e] for s, e in missing], [owner] * len(missing)).vectors
            for span, vector in zip(missing, encoded):
                self._vectors[(doc_id, *span)] = vector / max(float(np.linalg.norm(vector)), 1e-12)
        return [self._vectors[(doc_id, *span)] for span in spans]

    def doc(self, doc_id: str) -> DocLayout:
        if doc_id not in self._docs:
            positions = sorted(self._by_doc[doc_id], key=lambda i: (self.chunks[i].start, self.chunks[i].end))
            chars = [" "] * max(self.chunks[i].end for i in positions)
            for i in positions:
                c = self.chunks[i]
                chars[c.start:c.end] = c.text
            self._docs[doc_id] = DocLayout(positions, "".join(chars))
        return self._docs[doc_id]

    def parent(self, position: int, size: int) -> list[int]:
        """The positions of the chunk's parent: `size` chunks from its section's start (0: the section)."""
        c = self.chunks[position]
        doc = self.doc(c.doc_id).positions
        heading = lambda i: self.chunks[i].metadata.get("headings")  # noqa: E731
        at = doc.index(position)
        first, last = at, at
        while first > 0 and heading(doc[first - 1]) == heading(position):
            first -= 1
        while last + 1 < len(doc) and heading(doc[last + 1]) == heading(position):
            last += 1
        if size:
            first += (at - first) // size * size
            last = min(last, first + size - 1)
        return doc[first:last + 1]


@dataclass
class Passage:
    doc_id: str
    start: int
    end: int
    hit: Hit  # the best-ranked hit inside it
    sources: list[str]  # the retrieved chunk ids it holds


class SmallToBig:
    """Pipeline stage: the hits widened, merged and auto-merged as the module docstring says."""

    reads = ("hits",)
    writes = ("hits",)

    def __init__(self, config: SmallToBigConfig, layout: Layout, count: Callable[[str], int], *, index_id: str,
                 counter_id: str, max_chars: int | None, embedder: Embedder | None = None, name: str = "small_to_big"):
        self.config, self.layout, self.count, self.max_chars, self.name = config, layout, count, max_chars, name
        self.index_id, self.counter_id, self.embedder = index_id, counter_id, embedder
        if self.follows_query and embedder is None:
            raise ValueError("small_to_big.min_query_similarity needs the plan's embedder")

    @property
    def follows_query(self) -> bool:
        return self.config.window == "sentences" and self.config.min_query_similarity is not None

    def identity(self) -> dict[str, object]:
        return {"stage": "small_to_big", "config": self.config.model_dump(mode="json"), "index": self.index_id,
                "counter": self.counter_id, "max_chars": self.max_chars,
                "embedder": self.embedder.fingerprint if self.follows_query and self.embedder else None}

    def run(self, state: RequestState) -> RequestState:
        ordered = sorted(state.hits, key=lambda h: (h.rank, -h.score, h.chunk.id))
        indexed = [not is_live(h.chunk) and h.chunk.id in self.layout.position for h in ordered]
        kept = [h for h, ours in zip(ordered, indexed) if not ours]  # a tool's live passage, another retriever's
        passages = self._auto_merge([h for h, ours in zip(ordered, indexed) if ours])
        passages = self._widen(passages, self._similarity(state) if self.follows_query else None)
        merged = self._merge(passages)
        state.hits = [self._hit(p, rank) for rank, p in enumerate(merged, start=1)]
        state.hits += [h.model_copy(update={"rank": len(state.hits) + i}) for i, h in enumerate(kept, start=1)]
        return state

    def _auto_merge(self, hits: list[Hit]) -> list[Passage]:
        cfg, lay = self.config, self.layout
        found = {lay.position[h.chunk.id] for h in hits}
        out: list[Passage] = []
        taken: set[int] = set()
        for h in hits:
            pos = lay.position[h.chunk.id]
            if pos in taken:
                continue
            parent = lay.parent(pos, cfg.parent_chunks) if cfg.window == "parent" or cfg.merge_ratio is not None else [pos]
            share = sum(1 for p in parent if p in found) / len(parent)
            if cfg.window == "parent" or (cfg.merge_ratio is not None and share > cfg.merge_ratio):
                chunks = [lay.chunks[p] for p in parent]
                taken.update(p for p in parent if p in found)
                out.append(Passage(h.chunk.doc_id, min(c.start for c in chunks), max(c.end for c in chunks), h,
                                   [lay.chunks[p].id for p in parent if p in found]))
            else:
                taken.add(pos)
                out.append(Passage(h.chunk.doc_id, h.chunk.start, h.chunk.end, h, [h.chunk.id]))
        return out

    def _similarity(self, state: RequestState) -> Similarity:
        """Cosines of document slices to the request's query (its vector from the embedding stage, else embedded)."""
        assert self.embedder is not None
        q = state.query
        vector = state.query_vector
        if vector is None:
            vector = self.embedder.encode([q.text], [(q.tenant, q.scopes)], role="query").vectors[0]
        unit = np.asarray(vector, dtype=np.float32) / max(float(np.linalg.norm(vector)), 1e-12)
        embedder = self.embedder
        return lambda doc_id, spans, owner: [float(v @ unit) for v in self.layout.vectors(doc_id, spans, embedder, owner)]

    def _widen(self, passages: list[Passage], similarity: Similarity | None) -> list[Passage]:
        cfg = self.config
        if cfg.window not in ("sentences", "chunks"):
            return passages
        if similarity is not None and cfg.trim_hits:
            for p in passages:
                p.start, p.end = self._trim(p, similarity)
        own = [self.count(self._text(p.doc_id, p.start, p.end)) for p in passages]
        left = cfg.budget_tokens
        for i, p in enumerate(passages):
            limit = cfg.window_tokens
            if left is not None:
                limit = min(limit, left - sum(own[i + 1:]))
            p.start, p.end, used = self._grow(p, own[i], limit, similarity)
            if left is not None:
                left -= used
        return passages

    def _trim(self, p: Passage, similarity: Similarity) -> Span:
        """The passage less its first and last sentences below the query threshold, its best sentence kept."""
        spans = [(max(s, p.start), min(e, p.end)) for s, e in self.layout.doc(p.doc_id).sentences if s < p.end and e > p.start]
        spans = [span for span in spans if self._text(p.doc_id, *span).strip()]
        if len(spans) < 2:
            return p.start, p.end
        sims = similarity(p.doc_id, spans, _owner(p))
        best = max(range(len(spans)), key=lambda i: (sims[i], -i))
        low = self.config.min_query_similarity
        first, last = 0, len(spans) - 1
        while first < best and sims[first] < low:
            first += 1
        while last > best and sims[last] < low:
            last -= 1
        return spans[first][0], spans[last][1]

    def _units(self, p: Passage) -> tuple[list[Span], list[Span]]:
        """What may be added after the passage and before it, nearest first."""
        doc = self.layout.doc(p.doc_id)
        if self.config.window == "sentences":
            spans = doc.sentences
        else:
            spans = [(self.layout.chunks[i].start, self.layout.chunks[i].end) for i in doc.positions]
        ends = [e for _, e in spans]
        after = [(max(s, p.end), e) for s, e in spans[bisect.bisect_right(ends, p.end):]]
        before = [(s, min(e, p.start)) for s, e in reversed(spans) if s < p.start]
        return after, before

    def _grow(self, p: Passage, tokens: int, limit: int, similarity: Similarity | None) -> tuple[int, int, int]:
        """(start, end, tokens) of the passage grown by whole units, one after then one before in turn; following
        the query, a step takes the units up to the nearest one that reaches the threshold, within the gap."""
        sides = list(self._units(p))
        reach = [self._reach(p, units, tokens, limit, similarity) for units in sides]
        start, end = p.start, p.end
        while any(sides):
            for side in range(2):
                step = _first_at_least(reach[side], self.config.min_query_similarity, self.config.max_gap_sentences)
                if step is None:
                    sides[side] = []
                if not sides[side]:
                    continue
                taken = sides[side][:step + 1]
                new_start, new_end = (start, max(end, taken[-1][1])) if side == 0 else (min(start, taken[-1][0]), end)
                grown = tokens + sum(self.count(self._text(p.doc_id, s, e)) for s, e in taken)  # counts remembered
                if grown > limit or (self.max_chars is not None and new_end - new_start > self.max_chars):
                    sides[side] = []  # that side is done: nothing beyond a unit that does not fit
                    continue
                start, end, tokens = new_start, new_end, grown
                sides[side], reach[side] = sides[side][step + 1:], reach[side][step + 1:]
        return start, end, tokens

    def _reach(self, p: Passage, units: list[Span], tokens: int, limit: int,
               similarity: Similarity | None) -> list[float | None]:
        """Each unit's cosine to the query, for the units a window of `limit` tokens can reach (None: not scored)."""
        if similarity is None:
            return [None] * len(units)
        reachable = 0
        while reachable < len(units) and tokens < limit:
            tokens += self.count(self._text(p.doc_id, *units[reachable]))
            reachable += 1
        scored: list[float | None] = list(similarity(p.doc_id, units[:reachable], _owner(p)))
        return scored + [None] * (len(units) - reachable)

    def _touch(self, p: Passage, q: Passage) -> bool:
        """Whether two passages of one document overlap or only whitespace lies between them."""
        if p.doc_id != q.doc_id:
            return False
        gap = (q.end, p.start) if q.start <= p.start else (p.end, q.start)
        return gap[1] <= gap[0] or not self._text(p.doc_id, *gap).strip()

    def _merge(self, passages: list[Passage]) -> list[Passage]:
        """Passages of one document that overlap or touch as one (within max_chars), else the worse one trimmed."""
        out: list[Passage] = []
        for p in passages:
            for q in out:
                if not self._touch(p, q):
                    continue
                lo, hi = min(p.start, q.start), max(p.end, q.end)
                if self.max_chars is None or hi - lo <= self.max_chars:
                    q.start, q.end = lo, hi
                    q.sources += [s for s in p.sources if s not in q.sources]
                    p = None  # type: ignore[assignment]
                    break
                if q.start <= p.start:  # p lies after q: keep its tail
                    p.start = max(p.start, q.end)
                else:
                    p.end = min(p.end, q.start)
                text = self._text(p.doc_id, p.start, p.end)
                p.start, p.end = p.start + len(text) - len(text.lstrip()), p.end - len(text) + len(text.rstrip())
                if p.end <= p.start:
                    p = None  # type: ignore[assignment]
                    break
            if p is not None:
                out.append(p)
        return out

    def _text(self, doc_id: str, start: int, end: int) -> str:
        return self.layout.doc(doc_id).text[start:end]

    def _hit(self, p: Passage, rank: int) -> Hit:
        c = p.hit.chunk
        same = (p.start, p.end) == (c.start, c.end)
        chunk = c if same else c.model_copy(update={
            "id": Chunk.make_id(p.doc_id, p.start, p.end, WIDENED), "start": p.start, "end": p.end,
            "text": self._text(p.doc_id, p.start, p.end), "metadata": {**c.metadata, "widened_from": p.sources}})
        return p.hit.model_copy(update={"chunk": chunk, "rank": rank})


def _owner(p: Passage) -> Owner:
    return p.hit.chunk.tenant, p.hit.chunk.scopes


def _first_at_least(scores: list[float | None], low: float | None, gap: int) -> int | None:
    """The step to take next: 0 when not following the query (or nothing is left), else the position of the first
    unit reaching `low` within `gap` + 1 units; None: none does, that side is done."""
    if low is None or not scores:
        return 0
    for i, score in enumerate(scores[:gap + 1]):
        if score is not None and score >= low:
            return i
    return None


def _build(config: SmallToBigConfig, ctx: BuildContext) -> SmallToBig | None:
    if ctx.index is None or (config.window == "off" and config.merge_ratio is None):
        return None
    from ragopt.tokencount import token_counter

    counter = ctx.resources.get(("token-counter", "embedder", ctx.plan.embedder.fingerprint()),
                                lambda: token_counter("embedder", ctx.plan.embedder))
    layout = ctx.resources.get(("small-to-big-layout", ctx.index.manifest.id), lambda: Layout(ctx.index.chunks))
    max_chars = ctx.plan.stage_config("prompt").max_passage_chars if "prompt" in ctx.plan.stages else None
    return SmallToBig(config, layout, counter.count, index_id=ctx.index.manifest.id, counter_id=counter.fingerprint,
                      max_chars=max_chars, embedder=ctx.embedder)


def _ignores(config: SmallToBigConfig) -> Collection[str]:
    out = set()
    if config.window in ("off", "parent"):
        out.add("window_tokens")
    if config.window != "sentences":
        out.add("min_query_similarity")
    if config.window != "sentences" or config.min_query_similarity is None:
        out.update(("max_gap_sentences", "trim_hits"))
    if config.window != "parent" and config.merge_ratio is None:
        out.add("parent_chunks")
    return out


SPEC = StageSpec("small_to_big", SmallToBigConfig, _build, slot="widen", ignores=_ignores)
