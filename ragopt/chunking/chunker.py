"""The one door to the chunkers: `Chunker(config)` cuts documents with the chunker `config.chunker` names
(ragopt.chunking.registry) and makes the Chunks: each a (start, end) slice of its document (checked), its id from
the document, the span and the chunker's fingerprint, what the retrievers read before it (`headers`), and the
heading path it sits under in its metadata."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from ragopt.chunking.registry import chunker_spec
from ragopt.chunking.spec import ChunkerSpec, CutContext, Piece
from ragopt.chunking.tokenizer import ChunkTokenizer
from ragopt.config import ChunkerConfig, EmbedderConfig, fingerprint
from ragopt.errors import InputError
from ragopt.types import Chunk, Document

if TYPE_CHECKING:
    from ragopt.backends.embeddings import Embedder

# the settings every index built before `recursive` and `semantic` existed was fingerprinted with, under these names
_FIRST_SETTINGS = ("size", "overlap", "respect_sentences", "tokenizer")


class Chunker:
    """Cuts documents as `config` says. `embedder` (an Embedder) embeds the sentences of the semantic chunker;
    `embedder_config` alone is enough for the others (its tokenizer counts the sizes)."""

    def __init__(self, config: ChunkerConfig, embedder_config: EmbedderConfig | None = None, embedder: "Embedder | None" = None):
        self.config = config
        self.spec: ChunkerSpec = chunker_spec(config.chunker)
        if self.spec.needs_embedder and embedder is None:
            raise InputError(f"the {config.chunker} chunker embeds sentences: it needs an embedder", field="chunker.chunker")
        self.embedder = embedder
        self.tokenizer = ChunkTokenizer(config.tokenizer, embedder.config if embedder is not None else embedder_config)

    @cached_property
    def fingerprint(self) -> str:
        """Chunk ids and index ids depend on this: the chunker's name, version and knobs, the exact tokenizer used to
        count (tokens, recursive, semantic) and the embedder (semantic). The tokens and whole chunkers keep the ids
        of the indexes they built before the others existed: their first settings, under `mode`, and only the
        settings added since that differ from their defaults."""
        config = self.config
        dump = config.model_dump(mode="json")
        settings: dict[str, Any] = {"mode": config.chunker, **{name: dump[name] for name in _FIRST_SETTINGS}}
        settings.update({name: dump[name] for name, info in ChunkerConfig.model_fields.items()
                         if name not in settings and name != "chunker" and dump[name] != info.default})
        payload: dict[str, Any] = {"version": self.spec.version, "config": settings,
                                   "tokenizer": self.tokenizer.fingerprint if self.spec.counts_tokens else None}
        if self.spec.needs_embedder:
            assert self.embedder is not None
            payload["embedder"] = self.embedder.fingerprint
        return fingerprint(payload)

    def chunk(self, doc: Document) -> list[Chunk]:
        return self.chunk_all([doc])

    def chunk_all(self, docs: Iterable[Document]) -> list[Chunk]:
        docs = list(docs)
        ctx = CutContext(self.config, self.tokenizer, self.embedder)
        cuts = self.spec.cut([d.text for d in docs], ctx)
        return [chunk for doc, pieces in zip(docs, cuts) for chunk in self._chunks(doc, pieces)]

    def _chunks(self, doc: Document, pieces: Sequence[Piece]) -> list[Chunk]:
        out = []
        for piece in pieces:
            start, end = piece.start, piece.end
            if not (0 <= start <= end <= len(doc.text)) or (out and start < out[-1].start):
                raise AssertionError(f"the {self.config.chunker} chunker cut {doc.id!r} at ({start}, {end}): not a slice "
                                     f"of its {len(doc.text)} characters after ({out[-1].start if out else '-'}, ...)")
            path = [*_headings(doc), *piece.headings]
            out.append(Chunk(
                id=Chunk.make_id(doc.id, start, end, self.fingerprint),
                doc_id=doc.id, start=start, end=end, text=doc.text[start:end], title=doc.title, tenant=doc.tenant,
                scopes=doc.scopes, metadata={**doc.metadata, "headings": path} if piece.headings else doc.metadata,
                header=self._header(doc, path),
            ))
        return out

    def _header(self, doc: Document, path: list[str]) -> str | None:
        """What the retrievers read before the chunk's text: None is the title (Chunk.indexed_text)."""
        if self.config.headers == "title":
            return None
        if self.config.headers == "none":
            return ""
        path = path if _headings(doc) or not doc.title else [doc.title, *path]
        return " > ".join(path)


def _headings(doc: Document) -> list[str]:
    """The heading path a loaded file's section carries (ragopt.documents.sections), else none."""
    found = doc.metadata.get("headings")
    return [str(h) for h in found] if isinstance(found, (list, tuple)) else []
