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
   `budget_tokens` for all of them (None: the prompt's own budget decides), each keeping at least its own text;
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
from typing import Callable, Collection, Literal, Sequence

from pydantic import Field

from ragopt.config import StrictModel, knob
from ragopt.pipeline import RequestState
from ragopt.stages.spec import BuildContext, StageSpec
from ragopt.text import sentence_spans
from ragopt.types import Chunk, Hit, is_live

Span = tuple[int, int]
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
                 counter_id: str, max_chars: int | None, name: str = "small_to_big"):
        self.config, self.layout, self.count, self.max_chars, self.name = config, layout, count, max_chars, name
        self.index_id, self.counter_id = index_id, counter_id

    def identity(self) -> dict[str, object]:
        return {"stage": "small_to_big", "config": self.config.model_dump(mode="json"), "index": self.index_id,
                "counter": self.counter_id, "max_chars": self.max_chars}

    def run(self, state: RequestState) -> RequestState:
        ordered = sorted(state.hits, key=lambda h: (h.rank, -h.score, h.chunk.id))
        indexed = [not is_live(h.chunk) and h.chunk.id in self.layout.position for h in ordered]
        kept = [h for h, ours in zip(ordered, indexed) if not ours]  # a tool's live passage, another retriever's
        passages = self._auto_merge([h for h, ours in zip(ordered, indexed) if ours])
        passages = self._widen(passages)
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

    def _widen(self, passages: list[Passage]) -> list[Passage]:
        cfg = self.config
        if cfg.window not in ("sentences", "chunks"):
            return passages
        own = [self.count(self._text(p.doc_id, p.start, p.end)) for p in passages]
        left = cfg.budget_tokens
        for i, p in enumerate(passages):
            limit = cfg.window_tokens
            if left is not None:
                limit = min(limit, left - sum(own[i + 1:]))
            p.start, p.end, used = self._grow(p, own[i], limit)
            if left is not None:
                left -= used
        return passages

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

    def _grow(self, p: Passage, tokens: int, limit: int) -> tuple[int, int, int]:
        """(start, end, tokens) of the passage grown by whole units, one after then one before in turn."""
        after, before = self._units(p)
        start, end = p.start, p.end
        sides = [after, before]
        while any(sides):
            for side in range(2):
                if not sides[side]:
                    continue
                s, e = sides[side][0]
                new_start, new_end = (start, max(end, e)) if side == 0 else (min(start, s), end)
                grown = tokens + self.count(self._text(p.doc_id, s, e))  # each unit counted once, remembered
                if grown > limit or (self.max_chars is not None and new_end - new_start > self.max_chars):
                    sides[side] = []  # that side is done: nothing beyond a unit that does not fit
                    continue
                start, end, tokens = new_start, new_end, grown
                sides[side] = sides[side][1:]
        return start, end, tokens

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


def _build(config: SmallToBigConfig, ctx: BuildContext) -> SmallToBig | None:
    if ctx.index is None or (config.window == "off" and config.merge_ratio is None):
        return None
    from ragopt.tokencount import token_counter

    counter = ctx.resources.get(("token-counter", "embedder", ctx.plan.embedder.fingerprint()),
                                lambda: token_counter("embedder", ctx.plan.embedder))
    layout = ctx.resources.get(("small-to-big-layout", ctx.index.manifest.id), lambda: Layout(ctx.index.chunks))
    max_chars = ctx.plan.stage_config("prompt").max_passage_chars if "prompt" in ctx.plan.stages else None
    return SmallToBig(config, layout, counter.count, index_id=ctx.index.manifest.id, counter_id=counter.fingerprint,
                      max_chars=max_chars)


def _ignores(config: SmallToBigConfig) -> Collection[str]:
    out = set()
    if config.window in ("off", "parent"):
        out.add("window_tokens")
    if config.window != "parent" and config.merge_ratio is None:
        out.add("parent_chunks")
    return out


SPEC = StageSpec("small_to_big", SmallToBigConfig, _build, slot="widen", ignores=_ignores)
