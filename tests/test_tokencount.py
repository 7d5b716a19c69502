"""Context tokens counted with the embedder's tokenizer or with a GGUF model's own vocabulary."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragopt.config import EmbedderConfig
from ragopt.errors import InputError
from ragopt.tokencount import token_counter

TEXT = "Fasting glucose is stored in mmol/L in the north lab system."


def test_embedder_counts_wordpieces() -> None:
    counter = token_counter("embedder", EmbedderConfig())
    assert counter.count(TEXT) == 16  # WordPiece: "fast ##ing", and "mm ##ol / l" for mmol/L
    assert counter.count("") == 0 and counter.name.startswith("embedder:")


def test_a_gguf_vocabulary_counts_with_llama_cpp(tiny_gguf: Path) -> None:
    pytest.importorskip("llama_cpp")
    from llama_cpp import Llama

    counter = token_counter(str(tiny_gguf), EmbedderConfig())
    reference = Llama(model_path=str(tiny_gguf), vocab_only=True, verbose=False)
    assert counter.count(TEXT) == len(reference.tokenize(TEXT.encode(), add_bos=False, special=False)) > 0
    assert counter.name == f"gguf:{tiny_gguf.name}"
    assert counter.fingerprint != token_counter("embedder", EmbedderConfig()).fingerprint


def test_a_missing_gguf_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no GGUF model"):
        token_counter(str(tmp_path / "absent.gguf"), EmbedderConfig())
