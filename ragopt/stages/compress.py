"""Prompt compression: drop near-duplicate passages, then keep the sentences most relevant to the query
within a token budget.

Per request, over the passages in the order the prompt numbers them (`number_passages`: rank order):

1. near-duplicates: a passage whose word-trigram Jaccard similarity with a better-ranked passage reaches
   `dedup_threshold` is dropped (the better-ranked one stays); in Chinese text, character trigrams;
2. every passage is split into sentences (`ragopt.text.sentence_spans`: English and Chinese sentence ends)
   and each sentence scored against the
   query: cosine similarity with the cached embedder (optionally blended with its passage's similarity,
   `passage_weight`), BM25 over the context's sentences, or both (each min-max scaled within the request,
   then averaged);
3. greedy selection within the budget, by score (optionally each passage's best sentence first, in rank
   order, `best_first`); a sentence whose exact text was already kept (overlapping chunks) is skipped;
4. each passage's kept sentences in their original order: neighbours joined by the original text between
   them, a gap marked " ... ".

Citation numbers: passages keep their rank order and their place, so `[n]` names the same passage with or
without compression; the only passages removed are near-duplicates (the passages after one move up a
number). A passage none of whose sentences fit keeps its place with an empty text (its title still shows).
Each hit keeps its Chunk identity (id, doc_id, start, end), so span metrics still work; its text becomes the
kept sentences, and `chunk.metadata["kept_spans"]` lists their document char offsets ([start, end) pairs).

The budget is a share of the passages' tokens (0 < x <= 1), or a token count for the prompt the generator
sees: the instructions, the question and the passages, so the passages get what the others leave. Tokens
are counted with the callable the caller gives (the generator's tokenizer); without one, with the
embedder's tokenizer or by whitespace (`tokenizer`).

Defaults as measured by benchmarks/bench_compression.py (SciFact test, 188 claims, top-10 hybrid context):
embedder scores blended 0.7 with the passage's, by score, kept 97.4% / 93.9% / 84.6% of the gold rationale
sentences at 75% / 50% / 25% of the tokens, where dropping the lowest-ranked whole passages kept 96.8% /
92.2% / 81.4%; sentence similarity alone kept 93.0% / 84.9% / 74.4% (the top passages hold most evidence).
"""

from __future__ import annotations

from functools import cached_property
from typing import Callable, Literal, Sequence

import numpy as np
from pydantic import Field, model_validator

from ragopt.config import BM25Config, EmbedderConfig, StrictModel, knob
from ragopt.errors import InputError
from ragopt.pipeline import RequestState
from ragopt.backends.embeddings import Embedder
from ragopt.backends.bm25 import BM25Index
from ragopt.stages.prompt import PromptConfig, number_passages
from ragopt.stages.spec import BuildContext, Plan, StageSpec
from ragopt.text import Analyzer, analyzer_for, sentence_spans, word_spans, word_units
from ragopt.types import Hit

GAP = " ... "
_SHINGLE = 3  # words per shingle for near-duplicate detection


class CompressConfig(StrictModel):
    budget: int | float | None = knob(
        None,
        sweep=[None, 0.75, 0.5, 0.25],
        description="share of the passages' tokens to keep (0 < x <= 1), or a token count for the whole prompt "
        "(instructions + question + passages); None = no sentence selection",
    )
    dedup_threshold: float | None = knob(
        0.9, sweep=[None, 0.9], gt=0, le=1, description="word-trigram Jaccard at which a passage is a near-duplicate; None = off"
    )
    scorer: Literal["embedder", "bm25", "both"] = knob("embedder", sweep=["embedder", "bm25", "both"])
    passage_weight: float = knob(
        0.7, sweep=[0.0, 0.3, 0.7], ge=0, le=1,
        description="embedder score = (1 - w) x sentence similarity + w x its passage's similarity to the query",
    )
    best_first: bool = Field(False, description="give each passage its best sentence before ranking the rest by score")
    tokenizer: Literal["embedder", "whitespace"] = Field(
        "embedder", description="how tokens are counted when the caller gives no counter (the generator's tokenizer)"
    )

    @model_validator(mode="after")
    def _budget_range(self) -> "CompressConfig":
        b = self.budget
        if isinstance(b, float) and not 0 < b <= 1:
            raise ValueError(f"a share budget must lie in (0, 1], got {b}; a token count is a whole number")
        if isinstance(b, int) and b < 1:
            raise ValueError(f"a token budget must be at least 1, got {b}")
        return self


def shingles(text: str) -> set[tuple[str, ...]]:
    w = word_units(text)  # words, and in Chinese text characters: near-duplicates need no dictionary
    if len(w) < _SHINGLE:
        return {tuple(w)} if w else set()
    return {tuple(w[i : i + _SHINGLE]) for i in range(len(w) - _SHINGLE + 1)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def _minmax(x: np.ndarray) -> np.ndarray:
    span = float(x.max() - x.min()) if x.size else 0.0
    return (x - x.min()) / span if span > 0 else np.zeros_like(x)


class CompressPassages:
    """Pipeline stage: compresses `state.hits` for the query (see the module docstring).

    `embedder` scores sentences (cached vectors, keyed by each chunk's tenant and scopes); `count_tokens`
    is the generator's token counter; `prompt` holds the instructions an absolute budget must leave room for.
    """

    reads = ("query", "hits")
    writes = ("hits",)

    def __init__(
        self,
        config: CompressConfig | None = None,
        embedder: Embedder | None = None,
        count_tokens: Callable[[str], int] | None = None,
        prompt: PromptConfig | None = None,
        name: str = "compress",
        analyzer: Analyzer | None = None,
    ):
        self.config = config or CompressConfig()
        self.analyzer = analyzer  # the BM25 scorer's terms: the index's analyzer, else the passages' script decides
        self.name = name
        self._embedder = embedder
        self._count = count_tokens
        self.prompt = prompt or PromptConfig()
        self.instruction_tokens = 0
        if isinstance(self.config.budget, int):  # validated before any request: the instructions must fit
            self.instruction_tokens = self.count(f"{self.prompt.system}\n\n{self.prompt.instructions}")
            if self.config.budget <= self.instruction_tokens:
                raise InputError(
                    f"a budget of {self.config.budget} tokens leaves no room for passages: the instructions alone "
                    f"take {self.instruction_tokens}",
                    field="budget",
                )

    def identity(self) -> dict[str, object]:
        """What decides the kept sentences besides the request: the config, the embedder and the prompt layout."""
        return {"stage": "compress", "name": self.name, "config": self.config.model_dump(mode="json"),
                "embedder": self.embedder.fingerprint, "prompt": self.prompt.model_dump(mode="json"),
                "counter": "caller" if self._count is not None else self.config.tokenizer,
                "analyzer": self.analyzer.fingerprint if self.analyzer else "auto"}

    @cached_property
    def embedder(self) -> Embedder:
        return self._embedder or Embedder(EmbedderConfig())

    @cached_property
    def count(self) -> Callable[[str], int]:
        if self._count is not None:
            return self._count
        if self.config.tokenizer == "whitespace":
            return lambda text: len(word_spans(text))  # each Han character a token
        from ragopt.tokencount import token_counter

        return token_counter("embedder", self.embedder.config).count

    @cached_property
    def gap_tokens(self) -> int:
        return self.count(GAP.strip())

    def run(self, state: RequestState) -> RequestState:
        cfg = self.config
        memo: dict[str, int] = {}

        def count(text: str) -> int:  # a request counts each text once (the tokenizer dominates the cost)
            if text not in memo:
                memo[text] = self.count(text) if text else 0
            return memo[text]

        hits = [p.hit for p in number_passages(state.hits)]  # the prompt's order; repeated chunks once
        tokens_before = sum(count(h.chunk.text) for h in hits)
        kept, dropped = self._dedup(hits)
        attrs = state.usage.attrs
        attrs.update({"tokens_before": tokens_before, "duplicates_dropped": dropped})
        if cfg.budget is None:
            state.hits = kept
        else:
            if isinstance(cfg.budget, float):
                budget = int(cfg.budget * tokens_before)
            else:
                budget = max(cfg.budget - self.instruction_tokens - count(state.query.text), 0)
            attrs["budget_tokens"] = budget
            state.hits = self._select(state, kept, budget, count)
        attrs["tokens_after"] = sum(count(h.chunk.text) for h in state.hits)
        return state

    def _dedup(self, hits: Sequence[Hit]) -> tuple[list[Hit], list[str]]:
        threshold = self.config.dedup_threshold
        if threshold is None:
            return list(hits), []
        kept: list[Hit] = []
        kept_shingles: list[set] = []
        dropped: list[str] = []
        for h in hits:
            s = shingles(h.chunk.text)
            if any(jaccard(s, other) >= threshold for other in kept_shingles):
                dropped.append(h.chunk.id)
                continue
            kept.append(h)
            kept_shingles.append(s)
        return kept, dropped

    def _scores(self, state: RequestState, hits: Sequence[Hit], texts: list[str], passage_of: list[int]) -> np.ndarray:
        """Relevance of each sentence to the query, higher is better."""
        parts = []
        if self.config.scorer in ("embedder", "both"):
            q = state.query
            query_vec = self.embedder.encode([q.text], [(q.tenant, q.scopes)])
            owners = [(hits[i].chunk.tenant, hits[i].chunk.scopes) for i in passage_of]
            encoded = self.embedder.encode(texts, owners)
            state.usage.cache_hits += query_vec.cache_hits + encoded.cache_hits
            state.usage.cache_misses += query_vec.cache_misses + encoded.cache_misses
            similarity = encoded.vectors @ query_vec.vectors[0]
            w = self.config.passage_weight
            if w > 0:  # the passages' own vectors: cache hits when the index was built with this embedder
                whole = self.embedder.encode([h.chunk.indexed_text for h in hits], [(h.chunk.tenant, h.chunk.scopes) for h in hits])
                state.usage.cache_hits += whole.cache_hits
                state.usage.cache_misses += whole.cache_misses
                similarity = (1 - w) * similarity + w * (whole.vectors @ query_vec.vectors[0])[passage_of]
            parts.append(similarity)
        if self.config.scorer in ("bm25", "both"):
            bm25 = BM25Index(texts, BM25Config(), self.analyzer or analyzer_for(texts))
            parts.append(np.asarray(bm25.backend.scores(bm25.tokenize(state.query.text)), dtype=np.float32))
        if len(parts) == 1:
            return parts[0]
        return sum(_minmax(p) for p in parts) / len(parts)

    def _select(self, state: RequestState, hits: list[Hit], budget: int, count: Callable[[str], int]) -> list[Hit]:
        spans = [sentence_spans(h.chunk.text) for h in hits]
        sents = [(p, i) for p, ss in enumerate(spans) for i in range(len(ss))]  # (passage, sentence index)
        texts = [hits[p].chunk.text[slice(*spans[p][i])] for p, i in sents]
        attrs = state.usage.attrs
        attrs["sentences_total"] = len(sents)
        if not sents:
            attrs["sentences_kept"] = 0
            return hits
        scores = self._scores(state, hits, texts, [p for p, _ in sents])
        cost = [count(t) for t in texts]
        order = sorted(range(len(sents)), key=lambda j: (-scores[j], j))
        if self.config.best_first:
            best = {}
            for j in order:
                best.setdefault(sents[j][0], j)
            firsts = [best[p] for p in sorted(best)]
            first_set = set(firsts)
            order = firsts + [j for j in order if j not in first_set]

        chosen: dict[int, set[int]] = {p: set() for p in range(len(hits))}
        seen_texts: set[str] = set()
        used = 0
        for j in order:
            p, i = sents[j]
            if texts[j] in seen_texts:
                continue
            extra = cost[j] + (self.gap_tokens if chosen[p] else 0)
            if used + extra > budget:
                continue
            chosen[p].add(i)
            seen_texts.add(texts[j])
            used += extra
        rank_of = {sents[j]: r for r, j in enumerate(order)}
        out = [self._rebuilt(h, spans[p], chosen[p]) for p, h in enumerate(hits)]
        # the counts of joined texts can differ slightly from the sum of their parts: drop the weakest until within
        while any(chosen.values()) and sum(count(h.chunk.text) for h in out) > budget:
            p, i = max(((p, i) for p in chosen for i in chosen[p]), key=rank_of.__getitem__)
            chosen[p].discard(i)
            out[p] = self._rebuilt(hits[p], spans[p], chosen[p])
        attrs["sentences_kept"] = sum(len(c) for c in chosen.values())
        return out

    @staticmethod
    def _rebuilt(hit: Hit, spans: list[tuple[int, int]], keep: set[int]) -> Hit:
        text = hit.chunk.text
        pieces: list[str] = []
        previous = None
        for i in sorted(keep):
            if previous is not None:
                pieces.append(text[spans[previous][1] : spans[i][0]] if i == previous + 1 else GAP)
            pieces.append(text[slice(*spans[i])])
            previous = i
        base = hit.chunk.start
        kept_spans = [[base + spans[i][0], base + spans[i][1]] for i in sorted(keep)]
        chunk = hit.chunk.model_copy(update={"text": "".join(pieces), "metadata": {**hit.chunk.metadata, "kept_spans": kept_spans}})
        return hit.model_copy(update={"chunk": chunk})


def _build(config: CompressConfig, ctx: BuildContext) -> CompressPassages:
    return CompressPassages(config, embedder=ctx.embedder, analyzer=ctx.analyzer())


def _check(config: CompressConfig, plan: Plan) -> None:
    CompressPassages(config)  # a token budget below the instructions' size is refused here


SPEC = StageSpec("compress", CompressConfig, _build, slot="compress", check=_check)
