"""Counting the tokens a generator would receive: with the embedding model's tokenizer, or with a GGUF
model's own vocabulary (llama.cpp loads the vocabulary alone, without weights)."""

from __future__ import annotations

from array import array
from functools import lru_cache
from pathlib import Path
from typing import Callable

from ragopt.config import ChunkerConfig, EmbedderConfig
from ragopt.errors import InputError


# distinct texts whose counts one counter remembers: a sweep's passages, turns and prompt lines fit many times over
COUNT_CACHE_ENTRIES = 1 << 16


class TokenCounter:
    """A tokenizer's `tokenize`, and `ids` and `count` remembered by text (the same passages and prompt lines are
    counted in every trial). `splits_on_whitespace`: no token spans whitespace, so a text's tokens are its lines'
    tokens, in order."""

    def __init__(self, name: str, fingerprint: str, tokenize: Callable[[str], list[int]], *,
                 splits_on_whitespace: bool = False):
        self.name = name  # what the results say was used
        self.fingerprint = fingerprint  # what cached counts are keyed by
        self.tokenize = tokenize
        self.splits_on_whitespace = splits_on_whitespace
        # 4 bytes a token, unsigned: vocabulary ids and the CRC-32s standing for words where a model exposes no
        # tokenizer (multilingual-e5-small); a sweep's distinct lines and passages, remembered, stay tens of MB
        self.ids: Callable[[str], array] = lru_cache(maxsize=COUNT_CACHE_ENTRIES)(lambda text: array("I", tokenize(text)))

    def count(self, text: str) -> int:
        return len(self.ids(text))


def token_counter(spec: str, embedder: EmbedderConfig) -> TokenCounter:
    """`"embedder"`, `"generator"` (the default SmolLM2 GGUF) or a path to a GGUF file."""
    if spec == "embedder":
        from ragopt.chunking import Chunker

        chunker = Chunker(ChunkerConfig(chunker="tokens"), embedder)
        return TokenCounter(f"embedder:{embedder.model}", chunker.fingerprint, chunker.tokenizer.ids,
                            splits_on_whitespace=chunker.tokenizer.splits_on_whitespace)
    from ragopt.gguf_meta import default_model_path, model_fingerprint

    path = default_model_path() if spec == "generator" else Path(spec)
    if path is None or not path.is_file():
        raise InputError(f"no GGUF model at {spec!r} to count context tokens with", field="context_tokenizer")
    try:
        from llama_cpp import Llama
    except ImportError:
        raise InputError("counting with a GGUF vocabulary needs llama-cpp-python: pip install 'ragopt[llm]'",
                         field="context_tokenizer") from None
    vocab = Llama(model_path=str(path), vocab_only=True, verbose=False)
    return TokenCounter(
        f"gguf:{path.name}",
        model_fingerprint(path),
        lambda text: vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False),
    )
