"""The semantic chunker (ragopt/chunking/semantic.py) with the real MiniLM embedder: it cuts where the topic changes,
its percentile and threshold knobs each decide on their own, parts respect min and max sizes, sentence embeddings
come from the one cache (a second run embeds nothing), and without an embedder it is an error naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragopt.cache import workspace_cache
from ragopt.chunking import Chunker
from ragopt.config import ChunkerConfig
from ragopt.errors import InputError
from ragopt.index import make_embedder
from ragopt.types import Document

CATS = ("Cats sleep for most of the day. A cat grooms its fur with its rough tongue. Kittens learn to hunt by "
        "playing with their siblings.")
MARKETS = ("The stock market fell sharply on Monday. Investors sold bank shares after the interest rate decision. "
           "Bond yields rose to their highest level in a decade.")
TEXT = f"{CATS} {MARKETS}"


def semantic(embedder, **kw: object) -> Chunker:  # type: ignore[no-untyped-def]
    return Chunker(ChunkerConfig(chunker="semantic", **kw), embedder=embedder)  # type: ignore[arg-type]


def test_it_cuts_where_the_topic_changes_and_reads_embeddings_from_the_cache(tmp_path: Path) -> None:
    embedder = make_embedder(tmp_path / "ws")
    chunks = semantic(embedder, percentile=80, min_size=0).chunk(Document(id="d", text=TEXT))
    assert [c.text for c in chunks] == [CATS, MARKETS]
    again = make_embedder(tmp_path / "ws")  # a new process's embedder: every sentence from the cache
    assert semantic(again, percentile=80, min_size=0).chunk(Document(id="d", text=TEXT)) == chunks
    assert again.encode(["Cats sleep for most of the day."]).cache_hits == 1
    assert "model" not in again.__dict__  # the model was never loaded


def test_percentile_and_threshold_are_two_knobs(tmp_path: Path) -> None:
    embedder = make_embedder(tmp_path / "ws")
    doc = Document(id="d", text=TEXT)
    assert len(semantic(embedder, percentile=0, min_size=0).chunk(doc)) == 5  # every boundary but the closest pair
    assert len(semantic(embedder, percentile=0, threshold=2, min_size=0).chunk(doc)) == 1  # no distance exceeds 2
    assert [c.text for c in semantic(embedder, percentile=0, threshold=0.6, min_size=0).chunk(doc)][-1].endswith("decade.")


def test_small_parts_join_a_neighbour_and_long_ones_are_cut(tmp_path: Path) -> None:
    embedder = make_embedder(tmp_path / "ws")
    doc = Document(id="d", text=TEXT)
    merged = semantic(embedder, percentile=0, min_size=20, size=40).chunk(doc)  # parts of a sentence or two, joined
    assert 1 < len(merged) < 6 and all(c.text == TEXT[c.start:c.end] for c in merged)
    small = semantic(embedder, size=12, min_size=0, percentile=99).chunk(doc)
    counted = Chunker(ChunkerConfig(chunker="recursive", size=12)).tokenizer.offsets
    assert all(len(counted(c.text)) <= 12 for c in small)


def test_without_an_embedder_it_is_an_input_error_naming_the_key() -> None:
    with pytest.raises(InputError) as err:
        Chunker(ChunkerConfig(chunker="semantic"))
    assert err.value.field == "chunker.chunker" and "embedder" in str(err.value)


def test_its_fingerprint_names_the_embedder(tmp_path: Path) -> None:
    from ragopt.config import EmbedderConfig
    from ragopt.backends.embeddings import Embedder

    minilm = make_embedder(tmp_path / "ws")
    e5 = Embedder(EmbedderConfig(model="multilingual-e5-small"), workspace_cache(tmp_path / "ws"))
    assert semantic(minilm).fingerprint != semantic(e5).fingerprint
