"""Training examples from a split: positives from its qrels, negatives from ragopt's BM25 that the split does
not judge relevant; a split without judgements names its qrels file; batches keep a query's positives apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.tiny_corpus import TINY_DOCS, TINY_QRELS
from ragopt.errors import InputError
from ragopt.train.data import Example, MiningConfig, load_split, mine_examples, spread_batches


def test_examples_pair_judged_positives_with_unjudged_or_irrelevant_negatives(tiny_beir: Path, workspace: Path) -> None:
    evalset = load_split(tiny_beir, "test")
    examples = mine_examples(evalset, workspace, MiningConfig(depth=12, negatives=2), progress=False)
    text = {d["_id"]: f"{d['title']} {d['text']}" for d in TINY_DOCS}
    relevant = {(q, d) for q, d, g in TINY_QRELS if g > 0}
    by_text = {t: d for d, t in text.items()}
    assert {(e.query_id, by_text[e.positive]) for e in examples} <= relevant
    for e in examples:
        assert len(e.negatives) == 2
        assert all((e.query_id, by_text[n]) not in relevant for n in e.negatives)
    # q2 has two relevant documents: two examples, with the same negatives
    assert sum(e.query_id == "q2" for e in examples) == 2


def test_skip_passes_over_the_best_ranked_negatives(tiny_beir: Path, workspace: Path) -> None:
    evalset = load_split(tiny_beir, "test")
    first = mine_examples(evalset, workspace, MiningConfig(depth=12, negatives=2), progress=False)
    skipped = mine_examples(evalset, workspace, MiningConfig(depth=12, negatives=1, skip=1), progress=False)
    assert [e.negatives[1] for e in first] == [e.negatives[0] for e in skipped]


def test_a_split_without_judgements_names_its_qrels_file(beir_writer, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = beir_writer(tmp_path / "nojudge", qrels=[("q1", "d1", 0)], split="train")
    with pytest.raises(InputError) as err:
        load_split(folder, "train")
    assert err.value.path == str(folder / "qrels" / "train.tsv")
    with pytest.raises(InputError, match="qrels file not found"):
        load_split(folder, "dev")


def test_batches_keep_a_querys_positives_apart() -> None:
    examples = [Example(f"q{q}", f"p{q}-{i}", ("n",), f"q{q}") for q in range(6) for i in range(1 + q % 2)]
    batches = spread_batches(examples, 3, seed=1)
    assert sorted(e.positive for b in batches for e in b) == sorted(e.positive for e in examples)
    for b in batches[:2]:  # the first round: every query once
        assert len({e.query_id for e in b}) == len(b)
    assert spread_batches(examples, 3, seed=1) == batches and spread_batches(examples, 3, seed=2) != batches
