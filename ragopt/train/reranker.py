"""Train a cross-encoder on a split's qrels: (query, passage) pairs labelled 1 for a judged-relevant passage
and 0 for a mined hard negative, binary cross-entropy on one logit.

Started from the packaged MiniLM bi-encoder the classification head is fresh, so it needs far more data
and epochs than a bi-encoder fine-tune (../shared/NOTES.md measured one short epoch hurting SciFact); the
saved folder loads as `CrossEncoder(PATH)` and as the rerank stage's `model`.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Callable

from pydantic import Field

from ragopt.config import DEFAULT_EMBEDDER, StrictModel
from ragopt.train.data import Example, MiningConfig, mine_examples
from ragopt.train.loop import TrainedModel, checkpoint_folder, describe_run, prepare, publish, train_steps

KIND = "reranker"


class RerankerTrainingConfig(StrictModel):
    base: str = Field(DEFAULT_EMBEDDER, description="a cross-encoder or an encoder to put a fresh head on")
    epochs: int = Field(1, gt=0)
    batch_size: int = Field(16, gt=0, description="(query, passage) pairs per step")
    lr: float = Field(3e-5, gt=0)
    warmup: float = Field(0.1, ge=0, lt=1)
    max_length: int = Field(256, gt=8, description="tokens per (query, passage) pair")
    seed: int = 0
    mining: MiningConfig = MiningConfig()


def labelled_pairs(examples: list[Example]) -> list[tuple[str, str, float]]:
    """Each positive once and each of its negatives once, as (query, passage, label)."""
    return [(e.query, p, label) for e in examples for p, label in [(e.positive, 1.0), *((n, 0.0) for n in e.negatives)]]


def train_reranker(
    dataset: str | Path,
    split: str,
    workspace: str | Path,
    config: RerankerTrainingConfig | None = None,
    *,
    progress: bool = True,
    checkpoint_every: int = 10,
    on_step: Callable[[int], None] | None = None,
) -> TrainedModel:
    """Train (or reuse) a cross-encoder; returns its folder under `workspace/models`."""
    from ragopt.backends.embeddings import resolve_model_path

    config = config or RerankerTrainingConfig()
    workspace = Path(workspace)
    run = prepare(KIND, dataset, split, workspace, config)
    if run.found is not None:
        return run.found
    evalset, data_fp, base_fp, key = run.evalset, run.data_fp, run.base_fp, run.key

    import torch
    from sentence_transformers import CrossEncoder

    t0 = time.perf_counter()
    pairs = labelled_pairs(mine_examples(evalset, workspace, config.mining, progress=progress))
    mine_s = time.perf_counter() - t0
    batches = []
    for epoch in range(config.epochs):
        order = pairs[:]
        random.Random(config.seed * 1_000_003 + epoch).shuffle(order)
        batches += [order[i : i + config.batch_size] for i in range(0, len(order), config.batch_size)]
    base_path = resolve_model_path(config.base)
    with torch.random.fork_rng(devices=[]):  # the fresh head's initial weights come from this seed
        torch.manual_seed(config.seed)
        ce = CrossEncoder(base_path, num_labels=1, max_length=config.max_length, device="cpu",
                          local_files_only=Path(base_path).exists())
        bce = torch.nn.BCEWithLogitsLoss()

        def step_loss(batch: list[tuple[str, str, float]]) -> torch.Tensor:
            features = ce.tokenizer(
                [q for q, _, _ in batch], [p for _, p, _ in batch], padding=True, truncation="longest_first",
                max_length=config.max_length, return_tensors="pt",
            )
            logits = ce.model(**features).logits.view(-1)
            return bce(logits, torch.tensor([label for _, _, label in batch]))

        t1 = time.perf_counter()
        losses, start = train_steps(
            ce.model, batches, step_loss, lr=config.lr, warmup=config.warmup,
            checkpoint_dir=checkpoint_folder(workspace, KIND, key), checkpoint_every=checkpoint_every,
            progress=progress, desc="train-reranker", on_step=on_step,
        )
        train_s = time.perf_counter() - t1
    manifest = describe_run(
        KIND, key, config, base_fp=base_fp, data_fp=data_fp, dataset=dataset, split=split,
        losses=losses, start=start, mine_s=mine_s, train_s=train_s, pairs=len(pairs),
    )
    return publish(lambda folder: ce.save(str(folder)), workspace, KIND, key, manifest)

