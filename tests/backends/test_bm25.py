"""BM25: rank-bm25 and bm25s return the same top-10 (and Lucene's scores, computed here by hand); the
tokenizer casefolds, drops stopwords and stems; permission masks apply before ranking."""

from __future__ import annotations

import math
import random
import unicodedata
from collections import Counter

import numpy as np
import pytest

from ragopt.config import BM25Config
from ragopt.backends.bm25 import BM25Index, bm25_analyzer

TOPICS = {
    "astro": "star galaxy telescope orbit planet comet nebula gravity light spectrum",
    "bio": "cell protein gene enzyme membrane mutation receptor tissue virus immune",
    "geo": "rock volcano magma plate fault erosion glacier sediment mineral quake",
    "cook": "flour yeast oven butter sugar dough knead salt bake crust",
}
FILLER = "report study result method sample analysis effect data model level".split()


def synthetic_corpus(n: int = 60, seed: int = 7) -> list[str]:
    """Documents of different lengths mixing one or two topics with filler words: varied tf and length."""
    rng = random.Random(seed)
    names = list(TOPICS)
    docs = []
    for i in range(n):
        topics = rng.sample(names, rng.choice([1, 1, 2]))
        vocab = [w for t in topics for w in TOPICS[t].split()]
        length = 6 + i % 23 + rng.randint(0, 9)
        words = [rng.choice(vocab) if rng.random() < 0.6 else rng.choice(FILLER) for _ in range(length)]
        docs.append(" ".join(words).capitalize() + ".")
    return docs


QUERIES = [
    "star galaxy telescope",
    "gene mutation in the immune receptor",
    "volcano magma",
    "how to bake bread with yeast and flour",
    "gravity",
    "cell membrane protein enzyme study",
    "glacier erosion sediment rock quake fault",
    "the planets orbiting stars",  # stemming: planets -> planet, orbiting -> orbit, stars -> star
]


@pytest.mark.parametrize("stem", ["english", "none"])
def test_both_backends_return_the_same_top10(stem: str) -> None:
    corpus = synthetic_corpus()
    a = BM25Index(corpus, BM25Config(backend="bm25s", stemmer=stem))  # type: ignore[arg-type]
    b = BM25Index(corpus, BM25Config(backend="rank_bm25", stemmer=stem))  # type: ignore[arg-type]
    compared = 0
    for q in QUERIES:
        top_a, top_b = a.search(q, 10), b.search(q, 10)
        assert [i for i, _ in top_a] == [i for i, _ in top_b], q
        assert np.allclose([s for _, s in top_a], [s for _, s in top_b], rtol=1e-5)
        compared += len(top_a) == 10
    assert compared >= 6  # most queries fill a full top-10, so the comparison means something


def test_backends_agree_for_other_k1_and_b() -> None:
    corpus = synthetic_corpus(seed=11)
    for k1, b in [(0.9, 0.4), (2.0, 1.0), (1.2, 0.0)]:
        x = BM25Index(corpus, BM25Config(backend="bm25s", k1=k1, b=b))
        y = BM25Index(corpus, BM25Config(backend="rank_bm25", k1=k1, b=b))
        for q in QUERIES:
            assert [i for i, _ in x.search(q, 10)] == [i for i, _ in y.search(q, 10)], (k1, b, q)


def lucene_scores(docs: list[list[str]], query: list[str], k1: float, b: float) -> np.ndarray:
    n = len(docs)
    avgdl = sum(len(d) for d in docs) / n
    df = Counter(t for d in docs for t in set(d))
    out = np.zeros(n)
    for j, d in enumerate(docs):
        tf = Counter(d)
        for t in query:
            if tf[t]:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                out[j] += idf * tf[t] / (tf[t] + k1 * (1 - b + b * len(d) / avgdl))
    return out


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_scores_are_lucene_bm25(backend: str) -> None:
    corpus = synthetic_corpus(30)
    cfg = BM25Config(backend=backend, k1=1.5, b=0.6)  # type: ignore[arg-type]
    index = BM25Index(corpus, cfg)
    tokens = [index.tokenize(t) for t in corpus]
    for q in QUERIES[:4]:
        expected = lucene_scores(tokens, index.tokenize(q), 1.5, 0.6)
        got = index.backend.scores(index.tokenize(q))
        assert np.allclose(got, expected, rtol=1e-5, atol=1e-6), q


def test_tokenizer_casefolds_drops_stopwords_and_stems() -> None:
    tok = bm25_analyzer(BM25Config())
    assert tok("The RUNNING runners ran") == ["run", "runner", "ran"]
    assert tok("STRASSE Straße straße") == ["strass"] * 3  # casefold: ß -> ss
    assert tok("Ελληνικά ΚΕΊΜΕΝΟ") == ["ελληνικά", "κείμενο"]  # unicode-aware, not stemmed by an English stemmer
    assert tok("is it of the and a") == []

    plain = bm25_analyzer(BM25Config(stopwords="none", stemmer="none"))
    assert plain("The RUNNING runners") == ["the", "running", "runners"]
    no_stop = bm25_analyzer(BM25Config(stopwords="none"))
    assert no_stop("the runners") == ["the", "runner"]


def test_words_split_on_punctuation_but_never_on_combining_marks() -> None:
    plain = bm25_analyzer(BM25Config(stopwords="none", stemmer="none"))
    assert plain("covid-19, e.g. 3.5mg; x_y") == ["covid", "19", "e", "g", "3", "5mg", "x_y"]
    # Devanagari vowel signs and viramas are combining marks, not \w: a word must not fall apart at them
    assert plain("हिन्दी भाषा") == ["हिन्दी", "भाषा"]
    # decomposed (NFD) accents, and the combining dot that casefold leaves on a Turkish capital İ
    assert plain(unicodedata.normalize("NFD", "Café crème")) == [unicodedata.normalize("NFD", "café"), unicodedata.normalize("NFD", "crème")]
    assert plain("İstanbul") == ["i\u0307stanbul"]
    index = BM25Index(["हिन्दी भाषा का इतिहास", "हाथी बड़ा है"], BM25Config(stopwords="none", stemmer="none"))
    assert [i for i, _ in index.search("भाषा", 2)] == [0]  # not a match on shared single consonants


def test_stemming_lets_inflections_match() -> None:
    corpus = ["The telescope observed planets orbiting distant stars.", "Bread dough rises in a warm oven."]
    stemmed = BM25Index(corpus, BM25Config())
    assert [i for i, _ in stemmed.search("planet orbit star", 5)] == [0]
    unstemmed = BM25Index(corpus, BM25Config(stemmer="none"))
    assert unstemmed.search("planet orbit star", 5) == []


def test_mask_applies_before_ranking_and_only_positive_scores_return() -> None:
    corpus = synthetic_corpus()
    index = BM25Index(corpus, BM25Config())
    full = index.search("volcano magma", 5)
    assert len(full) == 5 and all(s > 0 for _, s in full)
    allowed = np.ones(len(corpus), dtype=bool)
    allowed[[i for i, _ in full]] = False  # hide the five best
    masked = index.search("volcano magma", 5, allowed)
    assert len(masked) == 5 and not {i for i, _ in masked} & {i for i, _ in full}  # still 5: filtered before top-k
    assert index.search("volcano magma", 5, np.zeros(len(corpus), dtype=bool)) == []
    assert index.search("zzzz qqqq", 5) == [] and index.search("the and of", 5) == []


TIE = "Magma rises under the volcano and the crust cracks."


def tied_corpus() -> list[str]:
    """40 identical documents, near-duplicates that differ by one repeated word, and unrelated filler."""
    filler = synthetic_corpus(30, seed=3)
    near = [TIE + " Ash" + " ash" * i for i in range(8)]
    corpus = [TIE] * 40 + near + filler
    random.Random(5).shuffle(corpus)  # the duplicates sit all over the index, not in one block
    return corpus


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_top_k_is_the_head_of_the_top_100_when_many_chunks_tie_at_the_cut_off(backend: str) -> None:
    corpus = tied_corpus()
    index = BM25Index(corpus, BM25Config(backend=backend))  # type: ignore[arg-type]
    for query in ("volcano magma", "crust", "ash volcano", "gravity star"):
        deep = index.search(query, 100)
        assert len(deep) >= (40 if "star" not in query else 5), query
        for k in range(1, len(deep) + 2):
            assert index.search(query, k) == deep[:k], (query, k)
    # the order is total: equal scores by position in the index, so the 40 duplicates come in index order
    tied = [i for i, s in index.search("volcano magma", 100) if corpus[i] == TIE]
    assert len(tied) == 40 and tied == sorted(tied)


MIXED = [
    "《战国无双3》是由光荣和ω-force合作开发的动作游戏，于2010年发售。",
    "上海是中国的经济中心，人口超过两千万。",
    "The telescope observed planets orbiting distant stars.",
    "Researchers were running trials of the new vaccine in 2010.",
    "机器学习模型使用GPU训练，速度更快。",
]


def test_chinese_questions_find_their_paragraph() -> None:
    index = BM25Index(MIXED, BM25Config())
    assert index.tokenize.name == "chinese"  # detected from the corpus: it holds Han characters
    assert index.search("《战国无双3》是由哪两个公司合作开发的？", 1)[0][0] == 0
    assert index.search("上海有多少人口", 1)[0][0] == 1
    # the old analyzer (English rules only) keeps every Han run as one word, so the question matches nothing
    assert BM25Index(MIXED, BM25Config(analyzer="english")).search("上海有多少人口", 3) == []


def test_mixed_corpus_latin_words_in_chinese_text_match_and_english_keeps_its_stemming() -> None:
    index = BM25Index(MIXED, BM25Config())
    assert [i for i, _ in index.search("gpu", 5)] == [4]  # a Latin word between Han characters
    assert [i for i, _ in index.search("ω-force", 5)] == [0]
    assert [i for i, _ in index.search("planet orbit", 5)] == [2]  # stemmed as by the english analyzer
    assert [i for i, _ in index.search("run trial", 5)] == [3]
    assert index.tokenize("running trials") == bm25_analyzer(BM25Config(analyzer="english"))("running trials")


def test_queries_go_through_the_documents_analyzer() -> None:
    """An English query on a Chinese index, or a Chinese query on an English index, is analyzed by the index's
    analyzer: the same words give the same terms either way."""
    chinese_index = BM25Index(MIXED, BM25Config())
    english_only = BM25Index(MIXED[2:4], BM25Config())
    assert english_only.tokenize.name == "english"
    assert chinese_index.tokenize("上海人口") == ["上海", "人口"]
    assert english_only.tokenize("上海人口") == ["上海人口"]


def test_the_analyzer_is_a_setting_and_part_of_the_fingerprint() -> None:
    whitespace = BM25Index(MIXED, BM25Config(analyzer="whitespace"))
    assert whitespace.tokenize.name == "whitespace"
    assert whitespace.search("running", 5)[0][0] == 3 and whitespace.search("run", 5) == []  # not stemmed
    fingerprints = {BM25Config(analyzer=name).fingerprint() for name in ("auto", "english", "chinese", "whitespace")}
    assert len(fingerprints) == 4


def test_an_unknown_analyzer_is_one_input_error_naming_the_setting() -> None:
    from ragopt.config import RetrievalConfig, validate
    from ragopt.errors import InputError

    with pytest.raises(InputError) as err:
        validate(RetrievalConfig, {"bm25": {"analyzer": "klingon"}}, "sweep.toml")
    assert err.value.field == "bm25.analyzer" and "'chinese'" in err.value.message
