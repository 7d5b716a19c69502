"""The recursive chunker (ragopt/chunking/recursive.py): every chunk a slice of its document and at most `size`
embedder tokens; cuts at the coarsest boundary that fits (paragraphs kept whole when they fit, then lines, sentences,
clauses, words); headings are hard boundaries and give each chunk its heading path (a `#` in a code block is no
heading); Chinese is cut at its own sentence ends and commas, never assuming spaces; overlap repeats whole pieces;
`headers` decides what the retrievers read before a chunk."""

from __future__ import annotations

import pytest

from ragopt.chunking import Chunker
from ragopt.config import ChunkerConfig
from ragopt.text import clause_spans, sentence_spans
from ragopt.types import Document

PARAGRAPHS = [
    "Retrieval augmented generation combines a retriever with a generator. The retriever finds passages.",
    "The generator reads them and writes an answer with citations. Chunk size matters: small chunks are precise "
    "but lose context, while large chunks keep context but dilute the embedding.",
    "Overlap between neighbouring chunks protects facts that straddle a boundary.\nA second line of the same "
    "paragraph.\nA third line, which is short.",
]
PROSE = "\n\n".join(PARAGRAPHS)
MARKDOWN = """Preface before any heading.

# Admissions
Patients arrive at the front desk. They show an identity card.

## Night shift
After 22:00 the side door is used.

```
# a comment in a code block, not a heading
```

<h2>Visiting <em>hours</em></h2>
Visitors may stay until 20:00.
"""
CHINESE = (
    "《战国无双3》是由光荣和ω-force开发的战国无双系列的正统第三续作。本作以三大故事为主轴，分别是以武田信玄等人为主的《关东三国志》，"
    "织田信长等人为主的《战国三杰》，石田三成等人为主的《关原的年轻武者》，丰富游戏内的剧情。此部份专门介绍角色，欲知武器情报、奥义字或擅长攻击类型等，"
    "请至战国无双系列1.由于乡里大辅先生因故去世，不得不寻找其他声优接手。2.此次的新角色为“甲斐姬”与“井伊直虎”！"
)


def recursive(size: int, overlap: int = 0, **kw: object) -> Chunker:
    return Chunker(ChunkerConfig(chunker="recursive", size=size, overlap=overlap, **kw))  # type: ignore[arg-type]


def doc(text: str, **kw: object) -> Document:
    return Document(id="d", text=text, title="Notes", **kw)  # type: ignore[arg-type]


def tokens_in(chunker: Chunker, text: str, start: int, end: int) -> int:
    return sum(1 for s, _ in chunker.tokenizer.offsets(text) if start <= s < end)


@pytest.mark.parametrize("size", [6, 12, 24, 48, 400])
@pytest.mark.parametrize("text", [PROSE, MARKDOWN, CHINESE], ids=["prose", "markdown", "chinese"])
def test_chunks_are_slices_within_size_covering_the_text(size: int, text: str) -> None:
    chunker = recursive(size)
    chunks = chunker.chunk(doc(text))
    assert chunks and chunks == recursive(size).chunk(doc(text))  # deterministic
    for c in chunks:
        assert c.text == text[c.start:c.end] and c.text == c.text.strip()
        assert 0 < tokens_in(chunker, text, c.start, c.end) <= size
    for prev, nxt in zip(chunks, chunks[1:]):  # no overlap asked: in order, only whitespace between
        assert prev.end <= nxt.start and text[prev.end:nxt.start].strip() == ""
    covered = set().union(*(range(c.start, c.end) for c in chunks))
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())


def test_the_coarsest_boundary_that_fits_wins() -> None:
    chunker = recursive(50)
    sizes = [tokens_in(chunker, PROSE, PROSE.index(p), PROSE.index(p) + len(p)) for p in PARAGRAPHS]
    assert min(a + b for a, b in zip(sizes, sizes[1:])) > 50 >= max(sizes)  # each paragraph fits, no two together
    chunks = chunker.chunk(doc(PROSE))
    assert [c.text for c in chunks] == PARAGRAPHS  # whole paragraphs, though a sentence would have fit more
    lines = recursive(sizes[2] - 1).chunk(doc(PARAGRAPHS[2]))
    assert all(c.end in {len(PARAGRAPHS[2])} | {i for i, ch in enumerate(PARAGRAPHS[2]) if ch == "\n"} for c in lines)
    sentence_ends = {e for _, e in sentence_spans(PARAGRAPHS[1])}
    clause_ends = {e for _, e in clause_spans(PARAGRAPHS[1])}
    for c in recursive(24).chunk(doc(PARAGRAPHS[1])):  # a paragraph too long: sentences, then clauses
        assert c.end in sentence_ends | clause_ends


def test_headings_are_hard_boundaries_and_give_the_heading_path() -> None:
    chunks = recursive(400).chunk(doc(MARKDOWN))
    assert [c.metadata.get("headings") for c in chunks] == [None, ["Admissions"], ["Admissions", "Night shift"],
                                                             ["Admissions", "Visiting hours"]]
    assert chunks[2].text.startswith("## Night shift") and "# a comment in a code block" in chunks[2].text
    assert chunks[3].text.startswith("<h2>")
    # what the retrievers read before each chunk
    assert [c.indexed_text.split(" #")[0] for c in chunks[:2]] == ["Notes Preface before any heading.", "Notes"]
    by_path = recursive(400, headers="path").chunk(doc(MARKDOWN))
    assert by_path[2].indexed_text.startswith("Notes > Admissions > Night shift ## Night shift")
    assert [c.id for c in by_path] != [c.id for c in chunks]  # another header, another index
    bare = recursive(400, headers="none").chunk(doc(MARKDOWN))
    assert all(c.indexed_text == c.text for c in bare)
    # a loaded file's section carries its path already (ragopt.documents.sections): it is not repeated
    section = Document(id="s", text="## Deeper\nText.", title="Guide > Setup", metadata={"headings": ["Guide", "Setup"]})
    (c,) = recursive(400, headers="path").chunk(section)
    assert c.metadata["headings"] == ["Guide", "Setup", "Deeper"] and c.indexed_text.startswith("Guide > Setup > Deeper ##")


@pytest.mark.parametrize("size", [16, 32])
def test_chinese_is_cut_at_its_sentence_ends_then_its_commas(size: int) -> None:
    chunker = recursive(size)
    chunks = chunker.chunk(doc(CHINESE))
    ends = {e for _, e in sentence_spans(CHINESE)} | {i + 1 for i, ch in enumerate(CHINESE) if ch in "，、；："}
    cut_inside = [c for c in chunks if c.end not in ends]
    # only a clause longer than the chunk is cut between words (Han characters one by one)
    long_clauses = [(s, e) for s, e in clause_spans(CHINESE) if tokens_in(chunker, CHINESE, s, e) > size]
    assert all(any(s < c.end < e for s, e in long_clauses) for c in cut_inside)
    assert sum(c.end in ends for c in chunks) >= len(chunks) // 2


def test_overlap_repeats_whole_trailing_pieces() -> None:
    text = " ".join(f"Sentence {i} has five words." for i in range(8))
    chunker = recursive(14, 6, tokenizer="whitespace")
    chunks = chunker.chunk(doc(text))
    assert len(chunks) > 2
    for prev, nxt in zip(chunks, chunks[1:]):
        assert nxt.start < prev.end and nxt.start > prev.start  # shared text, always moving forward
        assert prev.text.endswith(text[nxt.start:prev.end])
        assert text[nxt.start:prev.end] in {text[s:e] for s, e in sentence_spans(text)}  # a whole sentence


def test_a_word_longer_than_a_chunk_is_cut_into_token_windows() -> None:
    text = "short words then " + "x" * 300 + " and the end."
    chunker = recursive(8)
    chunks = chunker.chunk(doc(text))
    assert all(0 < tokens_in(chunker, text, c.start, c.end) <= 8 for c in chunks)
    assert "".join(c.text for c in chunks).replace(" ", "") == text.replace(" ", "")
