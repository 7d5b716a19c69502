"""Training the models ragopt cannot download: a tuned bi-encoder and a cross-encoder, from a split's qrels
with hard negatives mined by ragopt's own retrievers; seeded, resumable, and kept in the workspace keyed by
(training data, base model, seed, hyperparameters)."""

from ragopt.train.data import MiningConfig
from ragopt.train.embedder import EmbedderTrainingConfig, train_embedder
from ragopt.train.loop import TrainedModel
from ragopt.train.reranker import RerankerTrainingConfig, train_reranker

__all__ = [
    "EmbedderTrainingConfig", "MiningConfig", "RerankerTrainingConfig", "TrainedModel", "train_embedder", "train_reranker",
]
