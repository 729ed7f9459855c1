"""`finishes_within(seconds)`: a deadline for adversarial-input tests.

The verdict is this process's CPU time over the block, garbage collection paused in it: the
parser's own work, which a busy machine (the other suite of a CI run, a load spike) or a full
collection of the test process's large heap do not add to. A 700-byte YAML merge bomb parses
in ~0.04 s; it took 1.16 s of wall time once in CI.

A parser that went super-linear again would otherwise hold the suite for minutes before its
timing assertion failed: a wall-clock alarm at WALL_FACTOR times the deadline stops it and fails
the test there. Main thread only (SIGALRM), which is where pytest runs tests.
"""

from __future__ import annotations

import gc
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

# The wall-clock stop, as a multiple of the CPU deadline: room for a loaded machine.
WALL_FACTOR = 5


class TooSlow(AssertionError):
    """The work under test ran past its deadline."""


@contextmanager
def finishes_within(seconds: float) -> Iterator[None]:
    def stop(signum: int, frame: object) -> None:
        raise TooSlow(f"still running after {seconds * WALL_FACTOR} s of wall time")

    previous = signal.signal(signal.SIGALRM, stop)
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    started = time.process_time()
    signal.setitimer(signal.ITIMER_REAL, seconds * WALL_FACTOR)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if was_enabled:
            gc.enable()
    spent = time.process_time() - started
    assert spent < seconds, f"{spent:.2f} s of CPU, deadline {seconds} s"
