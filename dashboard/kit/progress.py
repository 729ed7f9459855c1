"""A terminal progress bar for long commands (seed_demo, import_telemetry, load_prices).

On a terminal it redraws one line in place: `\\r[#########...........] 45% 4,500/10,000 samples`.
Anywhere else (a CI log, a pipe, a file) a carriage return would pile up as garbage, so it
writes a plain line each time another ~10% is done instead. It writes to stderr, so the
command's stdout (counts, JSON) stays clean for whoever reads it.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TextIO

WIDTH = 20
# Non-terminal output: one line per this many percent.
LINE_EVERY_PERCENT = 10


class Progress:
    """`with Progress(total, "samples") as bar: ... bar.advance(n)`; `update(done)` sets the count."""

    def __init__(self, total: int, unit: str = "items", *, label: str = "", stream: TextIO | None = None) -> None:
        self.total = max(int(total), 0)
        self.unit = unit
        self.label = f"{label} " if label else ""
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", None) and self.stream.isatty())
        self.done = 0
        self._last_step = -1
        self._drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def percent(self) -> int:
        return 100 if not self.total else min(100, self.done * 100 // self.total)

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def update(self, done: int) -> None:
        self.done = min(max(done, 0), self.total) if self.total else done
        if self.tty:
            filled = WIDTH * self.percent // 100
            bar = "#" * filled + "." * (WIDTH - filled)
            self.stream.write(f"\r{self.label}[{bar}] {self._counts()}")
            self._drawn = True
        else:
            step = self.percent // LINE_EVERY_PERCENT
            if step > self._last_step:
                self._last_step = step
                self.stream.write(f"{self.label}{self._counts()}\n")
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line on a terminal, so the next output starts on a fresh one."""
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def _counts(self) -> str:
        return f"{self.percent}% {self.done:,}/{self.total:,} {self.unit}"
