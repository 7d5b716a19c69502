"""Progress on stderr, as a terminal or a log wants it: tqdm's bars on a terminal; elsewhere (CI, `> log 2>&1`) one
plain line per stage when it ends ("embedding: 1852 texts in 87.7 s"), no carriage returns or padding; nothing
with `disable` (--no-progress). Every progress bar in ragopt comes from `progress_bar`."""

from __future__ import annotations

import logging
import sys
import time
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

LINE_WIDTH = 120  # a plain line never runs past this (the terminal tables' width too)


@contextmanager
def host_logging_kept() -> Iterator[None]:
    """The root logger's handlers and level as they were before the block. Libraries add a root handler when
    imported or first used (ragas and the string libraries under it; ONNX Runtime's quantizer logging through the
    root logger), and every library's debug lines then reach stderr (bm25s logs at DEBUG): a library must not
    change its host's logging."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        root.handlers[:], root.level = handlers, level


def progress_bar(iterable: Iterable[Any] | None = None, *, desc: str = "", total: int | None = None, unit: str = "it",
                 disable: bool = False, **tqdm_options: Any) -> Any:
    """tqdm(iterable, desc=..., total=..., unit=..., **tqdm_options) on a terminal; a `PlainProgress` with the same
    surface (iteration, `update`, `set_postfix_str`, `close`, a context manager) when stderr is not one."""
    if not disable and sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(iterable, desc=desc, total=total, unit=unit, **tqdm_options)
    return PlainProgress(iterable, desc=desc, total=total, unit=unit, disable=disable,
                         initial=tqdm_options.get("initial", 0))


class PlainProgress:
    """Counts like a tqdm bar and prints one line when it closes (none when disabled or when nothing was
    counted in a stage that had nothing to do)."""

    def __init__(self, iterable: Iterable[Any] | None, desc: str, total: int | None, unit: str, disable: bool,
                 initial: int = 0):
        self.iterable, self.desc, self.unit, self.disable = iterable, desc, unit, disable
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)  # type: ignore[arg-type]
        self.n = initial
        self.postfix = ""
        self.started = time.perf_counter()
        self.closed = False

    def __iter__(self) -> Iterator[Any]:
        try:
            for item in self.iterable or ():
                yield item
                self.n += 1
        finally:
            self.close()

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = " ".join(str(text).split())

    def set_postfix(self, **values: Any) -> None:
        self.set_postfix_str(", ".join(f"{k}={v}" for k, v in values.items()))

    def set_description(self, desc: str, refresh: bool = True) -> None:
        self.desc = desc

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.disable or (self.n == 0 and not self.total):
            return
        count = f"{self.n}/{self.total}" if self.total is not None and self.total != self.n else f"{self.n}"
        plural = self.unit[:-1] + "ies" if self.unit.endswith("y") else self.unit + "s"
        unit = "" if self.unit == "it" else f" {self.unit if self.n == 1 else plural}"
        line = f"{self.desc or 'progress'}: {count}{unit} in {time.perf_counter() - self.started:.1f} s"
        if self.postfix:
            line += f" ({self.postfix})"
        print(" ".join(line.split())[:LINE_WIDTH], file=sys.stderr, flush=True)
