"""A sweep's chunking dimensions: each chunker of `chunkers` at each of `chunk_sizes` (and `chunk_overlaps`, where
it reads an overlap), with every combination of the [chunker] knobs it reads; whole documents once."""

from __future__ import annotations

import itertools
import re
from typing import Any, Sequence

from ragopt.config import ChunkerConfig, chunker_knobs, validate
from ragopt.errors import InputError

_OWN_KEYS = {"chunker": "chunkers", "size": "chunk_sizes", "overlap": "chunk_overlaps"}


def check_chunker_knobs(chunkers: Sequence[str], knobs: dict[str, Any]) -> None:
    """[chunker]: knobs of ChunkerConfig that some chunker of the sweep reads (sizes and overlaps have their own
    keys), each value valid; a ValueError naming `chunker.KNOB` otherwise."""
    for name, value in knobs.items():
        if name in _OWN_KEYS:
            raise ValueError(f"chunker.{name}: set by {_OWN_KEYS[name]}")
        readers = [c for c in chunkers if name in chunker_knobs(c)]
        if name not in ChunkerConfig.model_fields or not readers:
            known = sorted({k for c in chunkers for k in chunker_knobs(c)} - set(_OWN_KEYS))
            raise ValueError(f"chunker.{name}: not a knob of the chunkers {', '.join(chunkers)} "
                             f"(their knobs: {', '.join(known) or 'none'})")
        for v in value if isinstance(value, list) else [value]:
            try:
                validate(ChunkerConfig, {"chunker": readers[0], name: v}, "chunker")
            except InputError as exc:
                raise ValueError(f"chunker.{name}: {exc.message}, got {v!r}") from None


def chunker_grid(chunk_sizes: Sequence[int | str], chunk_overlaps: Sequence[int], chunkers: Sequence[str],
                 knobs: dict[str, Any]) -> list[ChunkerConfig]:
    """Every chunker at every size, in chunk_sizes order (an overlap as large as the chunk skipped for that size);
    whole documents once, where chunk_sizes or chunkers name them."""
    sizes = list(chunk_sizes) + (["whole"] if "whole" in chunkers else [])
    out: dict[str, ChunkerConfig] = {}
    for size in sizes:
        for name in ["whole"] if size == "whole" else [c for c in chunkers if c != "whole"]:
            readers = chunker_knobs(name)
            dims = {k: v if isinstance(v, list) else [v] for k, v in knobs.items() if k in readers}
            overlaps = [o for o in chunk_overlaps if o < int(size)] if "overlap" in readers else [0]
            for overlap, combo in itertools.product(overlaps, itertools.product(*dims.values())):
                values = {"chunker": name, **dict(zip(dims, combo))}
                values.update({"size": size} if size != "whole" else {})
                values.update({"overlap": overlap} if overlap else {})
                config = ChunkerConfig(**values)
                out.setdefault(config.fingerprint(), config)
    return list(out.values())


def chunker_label(chunker: ChunkerConfig, knobs: dict[str, Any]) -> str:
    """A chunker's part of a trial id: "whole", "c256-o0" (tokens, as before), "recursive-c256-o0", "semantic-c256",
    then each [chunker] knob this chunker reads that the sweep varies."""
    if chunker.chunker == "whole":
        label = "whole"
    else:
        label = f"c{chunker.size}" + (f"-o{chunker.overlap}" if chunker.chunker != "semantic" else "")
        label = label if chunker.chunker == "tokens" else f"{chunker.chunker}-{label}"
    varying = [k for k, v in knobs.items() if isinstance(v, list) and len(v) > 1 and k in chunker_knobs(chunker.chunker)]
    return "-".join([label, *(f"{k}{_short(getattr(chunker, k))}" for k in varying)])


def _short(value: Any) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return re.sub(r"[^A-Za-z0-9.]+", "-", text)
