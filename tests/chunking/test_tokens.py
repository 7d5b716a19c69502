"""The tokens chunker (ragopt/chunking/tokens.py): exact char offsets, never over `size` tokens, overlap, sentence
boundaries, whole mode, stable ids (the same as before the chunkers had a package), unicode. The embedder's real
WordPiece tokenizer (MiniLM's tokenizer.json) counts the tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragopt.config import DEFAULT_EMBEDDER, ChunkerConfig, EmbedderConfig
from ragopt.errors import InputError
from ragopt.chunking import Chunker
from ragopt.backends.embeddings import resolve_model_path
from ragopt.text import sentence_spans
from ragopt.types import Document

PROSE = (
    "Retrieval augmented generation combines a retriever with a generator. The retriever finds passages. "
    "The generator reads them and writes an answer with citations. Chunk size matters: small chunks are "
    "precise but lose context, while large chunks keep context but dilute the embedding. Overlap between "
    "neighbouring chunks protects facts that straddle a boundary. Sentence boundaries are the natural place "
    "to cut. 42 is a number that starts a sentence here. (Parenthetical sentences also count.) The end."
)
UNICODE = (
    "Grüße aus Köln – naïve café crème. Straße, Fluß und Maß sind deutsche Wörter. "
    "Ελληνικά: ο δρόμος είναι μακρύς. 東京は日本の首都です。 Emoji 😀 and 🚀 sit between words. "
    "İstanbul and ıi and ǅ are tricky for lower-casing. The last sentence is plain."
)


def tokens_chunker(size: int, overlap: int = 0, **kw: object) -> Chunker:
    return Chunker(ChunkerConfig(chunker="tokens", size=size, overlap=overlap, **kw))  # type: ignore[arg-type]


def doc(text: str = PROSE, **kw: object) -> Document:
    return Document(id="doc-1", text=text, title="RAG notes", **kw)  # type: ignore[arg-type]


def tokens_inside(chunker: Chunker, text: str, start: int, end: int) -> int:
    """Tokens of the whole text that lie inside [start, end): the count the chunker packed."""
    return sum(1 for s, e in chunker.tokenizer.offsets(text) if s >= start and e <= end)


@pytest.mark.parametrize(("size", "overlap"), [(8, 0), (16, 4), (32, 8), (64, 0), (300, 20)])
@pytest.mark.parametrize("text", [PROSE, UNICODE], ids=["prose", "unicode"])
def test_offsets_exact_and_never_over_size(size: int, overlap: int, text: str) -> None:
    chunker = tokens_chunker(size, overlap)
    chunks = chunker.chunk(doc(text))
    assert chunks
    token_starts = {s for s, _ in chunker.tokenizer.offsets(text)}
    token_ends = {e for _, e in chunker.tokenizer.offsets(text)}
    for c in chunks:
        assert c.text == text[c.start : c.end]
        assert c.start in token_starts and c.end in token_ends  # cut on token boundaries, never inside one
        assert 0 < tokens_inside(chunker, text, c.start, c.end) <= size
    starts = [c.start for c in chunks]
    assert starts == sorted(set(starts))  # strictly moving forward
    # together the chunks cover every non-space character of the document
    covered = set().union(*(range(c.start, c.end) for c in chunks))
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())
    if size >= 300:
        assert len(chunks) == 1 and (chunks[0].start, chunks[0].end) == (0, len(text))


def test_unicode_offsets_are_characters_not_bytes() -> None:
    chunks = tokens_chunker(6).chunk(doc(UNICODE))
    assert len(chunks) > 10 and chunks[0].start == 0 and chunks[-1].end == len(UNICODE)
    for prev, nxt in zip(chunks, chunks[1:]):  # no overlap: consecutive pieces, only whitespace between them
        assert prev.end <= nxt.start and UNICODE[prev.end : nxt.start].strip() == ""
    assert "".join(UNICODE[c.start : c.end] for c in chunks).replace(" ", "") == UNICODE.replace(" ", "")
    emoji = next(c for c in chunks if "😀" in c.text)
    assert emoji.text.index("😀") == UNICODE.index("😀") - emoji.start  # a char offset, not a UTF-8 byte one


def test_sentences_are_packed_whole_when_they_fit() -> None:
    chunker = tokens_chunker(40)
    sentences = sentence_spans(PROSE)
    assert len(sentences) == 9  # "(Parenthetical ... count.)" ends before "The end."
    assert PROSE[sentences[-2][0] : sentences[-2][1]] == "(Parenthetical sentences also count.)"
    starts, ends = {s for s, _ in sentences}, {e for _, e in sentences}
    chunks = chunker.chunk(doc())
    assert len(chunks) > 1
    for c in chunks:
        assert c.start in starts and c.end in ends  # every cut falls on a sentence boundary

    ignoring = tokens_chunker(40, respect_sentences=False).chunk(doc())
    assert any(c.end not in ends for c in ignoring)  # without the rule, cuts land mid-sentence


def test_overlap_repeats_whole_trailing_sentences_with_whitespace_tokens() -> None:
    text = " ".join(f"S{i} has five words." for i in range(6))  # six sentences of 4 whitespace tokens
    spans = sentence_spans(text)
    assert len(spans) == 6
    no_overlap = tokens_chunker(9, 0, tokenizer="whitespace").chunk(doc(text))
    assert [(c.start, c.end) for c in no_overlap] == [(spans[i][0], spans[i + 1][1]) for i in (0, 2, 4)]
    overlapping = tokens_chunker(9, 4, tokenizer="whitespace").chunk(doc(text))
    assert [(c.start, c.end) for c in overlapping] == [(spans[i][0], spans[i + 1][1]) for i in range(5)]
    assert overlapping[1].text.startswith("S1 has five words.") and overlapping[0].text.endswith("S1 has five words.")
    # an overlap smaller than a sentence cannot repeat it: no overlap at all, rather than a cut sentence
    assert [(c.start, c.end) for c in tokens_chunker(9, 3, tokenizer="whitespace").chunk(doc(text))] == [
        (c.start, c.end) for c in no_overlap
    ]


def test_a_sentence_longer_than_size_is_cut_into_overlapping_windows() -> None:
    text = " ".join(f"w{i}" for i in range(25)) + "."
    chunks = tokens_chunker(10, 3, tokenizer="whitespace").chunk(doc(text))
    words = [c.text.split() for c in chunks]
    assert [len(w) for w in words] == [10, 10, 10, 4]
    for prev, nxt in zip(words, words[1:]):
        assert prev[-3:] == nxt[:3]  # three tokens shared with the next window
    assert words[-1][-1] == "w24."


def test_whole_mode_is_one_chunk_carrying_the_document() -> None:
    d = Document(id="d9", text=PROSE, title="T", tenant="acme", scopes=["hr"], metadata={"year": 2024})
    (chunk,) = Chunker(ChunkerConfig(chunker="whole")).chunk(d)
    assert (chunk.start, chunk.end, chunk.text) == (0, len(PROSE), PROSE)
    assert (chunk.doc_id, chunk.title, chunk.tenant, chunk.scopes, chunk.metadata) == ("d9", "T", "acme", ("hr",), {"year": 2024})


def test_tokens_mode_keeps_tenant_scopes_and_metadata_on_every_chunk() -> None:
    d = Document(id="d9", text=PROSE, tenant="acme", scopes=["hr", "ops"], metadata={"k": "v"})
    chunks = tokens_chunker(16).chunk(d)
    assert len(chunks) > 3
    assert {(c.tenant, c.scopes, c.doc_id) for c in chunks} == {("acme", ("hr", "ops"), "d9")}
    assert all(c.metadata == {"k": "v"} for c in chunks)


def test_blank_text_gives_no_token_chunks() -> None:
    assert tokens_chunker(8).chunk(doc("   \n ")) == []
    assert tokens_chunker(8).chunk(doc("")) == []


def test_ids_are_stable_and_depend_on_the_chunker() -> None:
    a = [c.id for c in tokens_chunker(16, 4).chunk(doc())]
    assert a == [c.id for c in tokens_chunker(16, 4).chunk(doc())]  # a new chunker, the same ids
    assert len(set(a)) == len(a)
    assert set(a).isdisjoint(c.id for c in tokens_chunker(16, 5).chunk(doc()))
    assert set(a).isdisjoint(c.id for c in tokens_chunker(16, 4, tokenizer="whitespace").chunk(doc()))
    other_doc = Document(id="doc-2", text=PROSE, title="RAG notes")
    assert set(a).isdisjoint(c.id for c in tokens_chunker(16, 4).chunk(other_doc))
    whole = Chunker(ChunkerConfig(chunker="whole"))
    assert whole.chunk(doc())[0].id == Chunker(ChunkerConfig(chunker="whole")).chunk(doc())[0].id


def test_ids_are_those_of_the_indexes_built_before_the_chunkers_package() -> None:
    """The tokens and whole chunkers fingerprint what they did when ChunkerConfig had `mode` and four settings, so
    an index built then is found again, with the same chunk ids."""
    import hashlib

    from ragopt.config import fingerprint

    tokenizer = Path(resolve_model_path(DEFAULT_EMBEDDER)) / "tokenizer.json"
    first = {"size": 64, "overlap": 16, "respect_sentences": True, "tokenizer": "embedder"}
    before = fingerprint({"version": 3, "config": {"mode": "tokens", **first},
                          "tokenizer": hashlib.sha256(tokenizer.read_bytes()).hexdigest()[:16]})
    assert tokens_chunker(64, 16).fingerprint == before
    assert Chunker(ChunkerConfig(mode="tokens", size=64, overlap=16)).fingerprint == before  # `mode` still reads
    whole = {"version": 3, "config": {"mode": "whole", **first, "size": 256, "overlap": 0}, "tokenizer": None}
    assert Chunker(ChunkerConfig(chunker="whole")).fingerprint == fingerprint(whole)
    # a setting added since, away from its default, makes other ids
    assert Chunker(ChunkerConfig(chunker="whole", headers="none")).fingerprint != fingerprint(whole)


def test_fingerprint_covers_the_tokenizer_bytes_not_only_its_path(tmp_path: Path) -> None:
    original = Path(resolve_model_path(DEFAULT_EMBEDDER)) / "tokenizer.json"
    path = tmp_path / "tokenizer.json"
    path.write_bytes(original.read_bytes())
    before = tokens_chunker(16, tokenizer=str(path))
    assert before.fingerprint == tokens_chunker(16, tokenizer=str(path)).fingerprint
    path.write_bytes(original.read_bytes().replace(b'"[UNK]"', b'"[UNK] "', 1))  # same path, other bytes
    after = tokens_chunker(16, tokenizer=str(path))
    assert after.fingerprint != before.fingerprint
    assert after.chunk(doc())[0].id != before.chunk(doc())[0].id


def test_a_missing_tokenizer_is_an_input_error_naming_the_file(tmp_path: Path) -> None:
    absent = tmp_path / "absent.json"
    with pytest.raises(InputError) as err:
        _ = tokens_chunker(16, tokenizer=str(absent)).fingerprint
    assert err.value.path == str(absent) and err.value.field == "tokenizer" and "not found" in str(err.value)
    folder = tmp_path / "model-without-tokenizer"
    folder.mkdir()
    embedder_without = Chunker(ChunkerConfig(chunker="tokens", size=16), EmbedderConfig(model=str(folder)))
    with pytest.raises(InputError) as err:
        _ = embedder_without.fingerprint
    assert err.value.path == str(folder / "tokenizer.json") and "has no tokenizer.json" in str(err.value)


CHINESE = (
    "《战国无双3》是由光荣和ω-force开发的战国无双系列的正统第三续作。本作以三大故事为主轴，分别是以武田信玄等人为主的《关东三国志》，"
    "织田信长等人为主的《战国三杰》，石田三成等人为主的《关原的年轻武者》，丰富游戏内的剧情。此部份专门介绍角色，欲知武器情报、奥义字或擅长攻击类型等，"
    "请至战国无双系列1.由于乡里大辅先生因故去世，不得不寻找其他声优接手。2.此次的新角色为“甲斐姬”与“井伊直虎”！"
)


@pytest.mark.parametrize("size", [16, 32, 64])
@pytest.mark.parametrize("tokenizer", ["embedder", "whitespace"])
def test_chinese_chunks_end_at_chinese_sentence_ends(size: int, tokenizer: str) -> None:
    chunker = tokens_chunker(size, tokenizer=tokenizer)
    chunks = chunker.chunk(doc(CHINESE))
    assert len(chunks) > 1  # Han characters are counted: a paragraph without spaces is still many tokens
    spans = sentence_spans(CHINESE)
    long_sentences = [(s, e) for s, e in spans if tokens_inside(chunker, CHINESE, s, e) > size]
    for c in chunks:
        assert c.text == CHINESE[c.start : c.end]
        assert 0 < tokens_inside(chunker, CHINESE, c.start, c.end) <= size
        # a chunk ends at a sentence end (。！…), unless it cuts a sentence longer than size tokens
        assert c.end in {e for _, e in spans} or any(s < c.end < e for s, e in long_sentences)
    assert sum(c.end in {e for _, e in spans} for c in chunks) >= 2


def test_cuts_never_fall_inside_a_character(tmp_path: Path) -> None:
    """A byte-level BPE splits a letter from its combining mark and an emoji sequence into several tokens;
    the chunker moves such cuts to the character's edge."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(["plain words only"], trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path = tmp_path / "tokenizer.json"
    bpe.save(str(path))
    text = "cafe\u0301 " * 5 + "👩\u200d💻 " * 5 + "e\u0301\u0301 done"  # decomposed accents, a ZWJ emoji sequence
    chunker = tokens_chunker(3, tokenizer=str(path), respect_sentences=False)
    inside = {i for i in range(1, len(text)) if text[i] in "\u0301\u200d" or text[i - 1] == "\u200d"}
    assert any(s in inside or e in inside for s, e in chunker.tokenizer.offsets(text))  # the tokenizer does split them
    chunks = chunker.chunk(doc(text))
    assert len(chunks) > 3
    for c in chunks:
        assert c.start not in inside and c.end not in inside
        assert c.text == text[c.start : c.end]
