"""ragopt: compose, trace and tune retrieval-augmented generation pipelines behind quality gates."""

from ragopt.pipeline import Pipeline, RequestState, Result, Stage, Step
from ragopt.types import Answer, Chunk, Citation, Document, Hit, Query, Turn

__version__ = "0.1.0"

__all__ = [
    "Answer", "Chunk", "Citation", "Document", "Hit", "Pipeline", "Query", "RequestState", "Result", "Stage",
    "Step", "Turn", "__version__",
]
