"""Checks on what was read: values no powered GPU reports, and samples outside a run's window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

from runs.telemetry.importers.common import LineProblem, ParsedSample, ParseResult

# Fields a powered GPU never reports as 0: a file where all of them read 0 comes from a broken
# tool or exporter (every DCGM value 0 is the classic dcgm-exporter failure), not an idle GPU.
NEVER_ZERO_FIELDS = (
    "temperature_c",
    "power_watts",
    "power_limit_watts",
    "memory_total_bytes",
    "sm_clock_mhz",
    "mem_clock_mhz",
)
# How far outside a run's window samples may fall: a node's telemetry loop starts a little
# before the training process and stops a little after.
WINDOW_SLACK = timedelta(minutes=10)


def suspect_values(samples: list[ParsedSample]) -> str:
    """Why these samples cannot be real readings ('' when they can): every never-zero field is 0."""
    seen = [getattr(s, name) for s in samples for name in NEVER_ZERO_FIELDS if getattr(s, name) is not None]
    if not seen or any(seen):
        return ""
    return (
        f"every reading is 0, including temperature, power, clocks and memory size ({len(samples)} samples): "
        "a GPU that is on never reads 0 there, so the tool or exporter that wrote this file is broken"
    )


class HasRunTimes(Protocol):
    # Read-only members: a model's DateTimeField reads as `datetime | None` but accepts more.
    @property
    def submitted_at(self) -> datetime | None: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def ended_at(self) -> datetime | None: ...


def run_window(run: HasRunTimes, now: datetime | None = None) -> tuple[datetime | None, datetime | None]:
    """The span a run's telemetry can come from: started (else submitted) to ended (else now)."""
    first = run.started_at or run.submitted_at
    return first, (run.ended_at or now or datetime.now(UTC)) if first is not None else None


def keep_window(result: ParseResult, first: datetime | None, last: datetime | None, what: str) -> None:
    """Drop the samples outside [first - slack, last + slack] and name how many, with the window.

    A file's clock read in the wrong zone, or a file of another run, lands hours or years away
    from the run; those samples are never stored into it. `--start` / `--tz` place them.
    """
    if first is None or not result.samples:
        return
    low, high = first - WINDOW_SLACK, (last or first) + WINDOW_SLACK
    inside = [s for s in result.samples if low <= s.ts <= high]
    outside = len(result.samples) - len(inside)
    if not outside:
        return
    times = [s.ts for s in result.samples if not low <= s.ts <= high]
    result.problems.insert(
        0,
        LineProblem(
            0,
            f"{outside} of {len(result.samples)} samples ({min(times).isoformat()} to {max(times).isoformat()}) "
            f"fall outside {what} ({first.isoformat()} to {(last.isoformat() if last else 'now')}, "
            f"give or take {int(WINDOW_SLACK.total_seconds() // 60)} minutes): not imported; if the file's clock "
            "is not UTC pass --tz, and for a file without times pass --start",
        ),
    )
    result.samples = inside
