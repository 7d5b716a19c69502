"""Generated tokens as streamed text: incremental UTF-8 decoding with stop strings, and what was streamed
when (the first and last token on the generator's clock, for TTFT and TPOT)."""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class StopFilter:
    """Incremental UTF-8 decoding plus stop strings: emits text only once it cannot be the start of a stop string."""

    def __init__(self, stops: tuple[str, ...]):
        self.stops = tuple(s for s in stops if s)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.pending = ""
        self.stopped = False

    def feed(self, data: bytes) -> str:
        self.pending += self.decoder.decode(data)
        for s in self.stops:
            i = self.pending.find(s)
            if i >= 0:
                out, self.pending, self.stopped = self.pending[:i], "", True
                return out
        hold = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        cut = len(self.pending) - hold
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out

    def flush(self) -> str:
        out = self.pending + self.decoder.decode(b"", final=True)
        self.pending = ""
        return out


@dataclass
class StreamedText:
    """What one generation produced, and when its first and last tokens came (the generator's clock)."""

    pieces: list[str] = field(default_factory=list)
    n_out: int = 0
    finish: str = "length"
    t_first: float | None = None
    t_last: float | None = None

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def emit(self, piece: str, on_token: Callable[[str], None] | None) -> None:
        if piece:
            self.pieces.append(piece)
            if on_token is not None:
                on_token(piece)

    def timing_attrs(self, arrival: float) -> dict[str, Any]:
        n, first, last = self.n_out, self.t_first, self.t_last
        tpot = (last - first) * 1000 / (n - 1) if n > 1 else None
        return {
            "ttft_ms": (first - arrival) * 1000 if first is not None else None,
            "decode_tokens": n,
            "decode_ms": (last - first) * 1000 if n > 1 else None,
            "tpot_ms": tpot,
            "tokens_per_s": 1000.0 / tpot if tpot else None,
        }
