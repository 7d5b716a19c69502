from __future__ import annotations

from ragopt.stages.citations import format_citations, invalid_markers, marker_numbers, parse_citations
from ragopt.types import Chunk


def chunk(i: int) -> Chunk:
    return Chunk(id=f"c{i}", doc_id=f"d{i}", start=0, end=1, text="x")


PASSAGES = {1: chunk(1), 2: chunk(2), 3: chunk(3)}


def test_marker_forms():
    assert marker_numbers("Paris [1]. Big [2][3].") == [1, 2, 3]
    assert marker_numbers("see [1, 3] and [3]") == [1, 3]
    assert marker_numbers("range [2-4]") == [2, 3, 4]
    assert marker_numbers("[Passage 2] and [passages 1, 3]") == [2, 1, 3]
    assert marker_numbers("in [2023] or [a] or [] or [1.5]") == []  # years and other brackets are not citations
    assert marker_numbers("huge [1-900]") == [1, 900]  # absurd ranges are not expanded


def test_resolved_to_chunk_and_document():
    cites = parse_citations("Paris is the capital [2]. Also [1].", PASSAGES)
    assert [(c.marker, c.chunk_id, c.doc_id, c.valid) for c in cites] == [(2, "c2", "d2", True), (1, "c1", "d1", True)]


def test_citation_to_a_passage_not_provided_is_flagged():
    # passage 4 was dropped by the token budget (or never retrieved): the model could not have read it
    cites = parse_citations("Claim [1]. Other claim [4]. And [0].", PASSAGES)
    assert [(c.marker, c.valid) for c in cites] == [(1, True), (4, False), (0, False)]
    assert invalid_markers(cites) == [4, 0]
    lines = format_citations(cites, {1: "Title one"})
    assert lines[0].startswith("[1] d1 (Title one)") and "no such passage" in lines[1]


def test_no_markers_no_citations():
    assert parse_citations("I cannot answer from the sources.", PASSAGES) == []
