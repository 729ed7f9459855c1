"""`finishes_within(seconds)`: a deadline for adversarial-input tests.

A parser that went super-linear again would otherwise hold the suite for minutes before its
timing assertion failed; the alarm stops it at the deadline and fails the test there. Main
thread only (SIGALRM), which is where pytest runs tests.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager


class TooSlow(AssertionError):
    """The work under test ran past its deadline."""


@contextmanager
def finishes_within(seconds: float) -> Iterator[None]:
    def stop(signum: int, frame: object) -> None:
        raise TooSlow(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    started = time.perf_counter()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    elapsed = time.perf_counter() - started
    assert elapsed < seconds, f"{elapsed:.2f} s, deadline {seconds} s"
