"""What a pushed run may claim once its update is merged: the money bounds of SECURITY.md.

A run an API key writes counts against its policy's budget, so what is stored must stay a
run that could have happened. The request's own fields are checked by the API
(`runs.api.pushed_run_problems`); this module checks the run as it stands after the update
is merged with what was stored, so a run built up over several requests (a start an hour
ago, then an end in 2199) is held to the same bounds as one sent whole:

1. No time in the future beyond the clock skew allowance (AIRBOARD_MAX_FUTURE_SKEW_SECONDS):
   neither the run's nor an attempt's start or end.
2. The run and each attempt held their GPUs at most the runtime cap (`MAX_RUNTIME`, 14
   days), from start to end, or to now while running.
3. The attempts follow one another: their durations together fit in the run's span (from
   the earliest start, the run's or an attempt's, to the latest end, or now) plus the skew,
   and in the runtime cap. 1,000 overlapping attempts of 14 days each are 14,000 days of
   GPUs in a 14-day window; they are refused.

4. A classic run billed by instance (`instance_type` x ceil(accelerators / gpus_per_node)
   nodes) claims at least as many GPUs a node as its instance type holds.

So a pushed run's compute is at most its accelerators x its span, and its span at most the
runtime cap. Egress is bounded per run and day in `billing.costs.egress`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from runs.choices import RunSource
from runs.models.instance_types import instance_gpus
from runs.models.record import MAX_RUNTIME, Run


@dataclass(frozen=True)
class Span:
    """A start and end (None: still holding its GPUs) named by where it sits in the request."""

    field: str
    start: datetime | None
    end: datetime | None


def _hours(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 3600:,.1f} h"


def merged_problems(run: Run, attempts: list[Span], now: datetime) -> list[tuple[str, str]]:
    """(field, message) for each bound the merged run breaks; empty when it is plausible.

    `attempts` are every attempt of the run as stored after the merge (`attempts[n]` fields
    name the attempt number).
    """
    skew = timedelta(seconds=settings.AIRBOARD_MAX_FUTURE_SKEW_SECONDS)
    horizon = now + skew
    problems: list[tuple[str, str]] = []
    spans = [Span("", run.started_at, run.ended_at), *attempts]
    for span in spans:
        for name, value in (("started_at", span.start), ("ended_at", span.end)):
            if value is not None and value > horizon:
                problems.append(
                    (f"{span.field}{name}", f"is {value.isoformat()}, in the future beyond the {skew.seconds} s "
                     "clock skew allowance")
                )  # fmt: skip
        if span.start is not None and min(span.end or now, horizon) - span.start > MAX_RUNTIME:
            problems.append(
                (f"{span.field}started_at", f"the run would have held its GPUs longer than the {MAX_RUNTIME.days}-day "
                 "runtime cap")
            )  # fmt: skip
    spec = instance_gpus(run.instance_type) if run.source == RunSource.CLASSIC and run.instance_type else None
    if spec is not None and run.gpus_per_node < spec.count:
        # Billed as instance_type x ceil(num_accelerators / gpus_per_node) nodes: 512 GPUs at one
        # a node would be 512 eight-GPU instances.
        problems.append(
            ("gpus_per_node", f"is {run.gpus_per_node}, but {run.instance_type} holds {spec.count} GPUs a node")
        )
    if problems:
        return problems
    started = [a for a in attempts if a.start is not None]
    if not started:
        return problems
    total = sum(((a.end or now) - a.start for a in started if a.start is not None), timedelta())
    starts = [a.start for a in started if a.start is not None] + ([run.started_at] if run.started_at else [])
    ends = [a.end or now for a in started] + ([run.ended_at] if run.ended_at else [])
    run_span = max(ends) - min(starts)
    room = min(run_span + skew, MAX_RUNTIME)
    if total > room:
        problems.append(
            ("attempts", f"{len(started)} attempts held the GPUs for {_hours(total)} together, more than the "
             f"{_hours(room)} the run spans (attempts of a run follow one another; at most the "
             f"{MAX_RUNTIME.days}-day runtime cap)")
        )  # fmt: skip
    return problems
