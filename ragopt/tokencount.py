"""Counting the tokens a generator would receive: with the embedding model's tokenizer, or with a GGUF
model's own vocabulary (llama.cpp loads the vocabulary alone, without weights)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ragopt.config import ChunkerConfig, EmbedderConfig
from ragopt.errors import InputError


@dataclass(frozen=True)
class TokenCounter:
    name: str  # what the results say was used
    fingerprint: str  # what cached counts are keyed by
    tokenize: Callable[[str], list[int]]

    def count(self, text: str) -> int:
        return len(self.tokenize(text))


def token_counter(spec: str, embedder: EmbedderConfig) -> TokenCounter:
    """`"embedder"`, `"generator"` (the default SmolLM2 GGUF) or a path to a GGUF file."""
    if spec == "embedder":
        from ragopt.backends.chunker import Chunker

        chunker = Chunker(ChunkerConfig(mode="tokens"), embedder)
        offsets = chunker.token_offsets

        def tokenize(text: str) -> list[int]:  # a stable id per token string (the tokenizer's offsets give no ids)
            return [zlib.crc32(text[start:end].encode()) for start, end in offsets(text)]

        return TokenCounter(f"embedder:{embedder.model}", chunker.fingerprint, tokenize)
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
