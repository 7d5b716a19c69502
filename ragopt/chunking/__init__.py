"""Chunkers: one module per chunker (tokens, recursive, semantic, whole), each declaring a ChunkerSpec, one
registry, and the Chunker that cuts documents into Chunks with any of them (docs/chunking.md)."""

from ragopt.chunking.chunker import Chunker
from ragopt.chunking.registry import chunker_spec, chunker_specs
from ragopt.chunking.tokenizer import ChunkTokenizer

__all__ = ["ChunkTokenizer", "Chunker", "chunker_spec", "chunker_specs"]
