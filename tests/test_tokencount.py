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


def test_an_embedder_without_a_tokenizer_counts_words_whatever_their_crc() -> None:
    """multilingual-e5-small exposes no tokenizer: its tokens are words, their ids CRC-32s, up to 2**32 - 1 (a
    signed array held only half of them: `ragopt eval` on CMRC 2018 stopped with an OverflowError)."""
    import zlib

    words = ["光", "荣", "Fasting", "glucose", "mmol", "unit"]  # each one word: a Han character is a word alone
    assert any(zlib.crc32(w.encode()) >= 2**31 for w in words)  # the case that overflowed
    counter = token_counter("embedder", EmbedderConfig(model="multilingual-e5-small"))
    text = " ".join(words)
    assert list(counter.ids(text)) == [zlib.crc32(w.encode()) for w in words] and counter.count(text) == len(words)
