"""Stall streaks kept current on the write path: where each GPU's hung and process-less runs stand.

The overview used to find stalls by reading the last hour of raw samples of every running run
(~74,000 samples, 4.2 of the page's 4.4 s in the live demo). Ingest already holds each new
sample in hand, so it keeps, per GPU, one `GpuStreak` row: its latest sample's time and the
first sample of the trailing hung and process-less streaks (runs/telemetry/stalls.py says what
those are). The stall panel then reads one row a GPU, whatever the samples behind it.

A GPU is *hung* at a sample when

    utilization_gpu >= BUSY_UTILIZATION and (sm_active < SM_IDLE or power < POWER_FRACTION x limit)

(sm_active only where the agent reports it, Hopper and newer; power only with a known limit),
and *process-less* when `processes == []` (reported, and empty).

`advance` is called by `store_sample_rows` with the samples a batch really inserted, inside
its transaction, after the minute rollups (whose run locks, runs.telemetry.utilization.lock,
make two workers writing one run take turns: the second reads the first's committed row):

1. Group the samples by GPU, in time order, and read the GPUs' stored rows (one query).
2. A GPU whose new samples all come after its stored `last_ts` (the normal case) folds them
   in: a flagged sample starts a streak if none is open, an unflagged one ends it.
3. A GPU with a sample at or before its `last_ts` (a late or re-sent one) is recomputed from
   its raw samples of the LOOKBACK before its latest (both parts of the raw tier), as the
   page used to do: a late unflagged sample may split a streak, a late flagged one extend it.
   Unless all its new samples are older than its latest and that latest is in no streak (the
   common late batch, e.g. two batches of one node processed out of order): its latest
   sample, and so its row, stay as they are, and nothing is read (a recompute read ~20,000
   raw rows, ~270 ms of a worker).
4. Upsert the rows (one statement).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any

from runs.models import GpuStreak
from runs.telemetry import blocks

BUSY_UTILIZATION = 90.0
SM_IDLE = 10.0
POWER_FRACTION = 0.30
# Raw samples a recomputed GPU reads back from its latest: the stall panel says "at least" this.
LOOKBACK = timedelta(hours=1)

STALL_FIELDS = ["utilization_gpu", "sm_active", "power_watts", "power_limit_watts", "processes"]
_AT = {name: blocks.ROW_COLUMNS.index(name) for name in ("ts", *STALL_FIELDS)}

SeriesKey = tuple[int, int, int]  # (run_id, node_id, gpu_index)


def is_hung(utilization: float | None, sm_active: float | None, power: float | None, limit: float | None) -> bool:
    """The hung-collective signature at one sample (see the module docstring)."""
    if utilization is None or utilization < BUSY_UTILIZATION:
        return False
    if sm_active is not None and sm_active < SM_IDLE:
        return True
    if power is None or not limit:
        return False
    return power < POWER_FRACTION * limit


@dataclass
class Streak:
    """One GPU's state: latest sample, and the start of each trailing streak (None: not in one)."""

    last_ts: datetime | None = None
    hung_since: datetime | None = None
    no_process_since: datetime | None = None

    def fold(self, ts: datetime, hung: bool, no_process: bool) -> None:
        """Take in the sample after `last_ts`."""
        self.hung_since = (self.hung_since or ts) if hung else None
        self.no_process_since = (self.no_process_since or ts) if no_process else None
        self.last_ts = ts


def _marks(values: Sequence[Any]) -> tuple[bool, bool]:
    """(hung, process-less) of a sample's STALL_FIELDS values."""
    utilization, sm_active, power, limit, processes = values
    return is_hung(utilization, sm_active, power, limit), processes == []


def advance(rows: Sequence[Sequence[Any]]) -> int:
    """Fold newly stored sample rows (blocks.ROW_COLUMNS order) into their GPUs' streaks; returns GPUs written.

    Folding a GPU's samples in time order leaves what its trailing ones say: the latest time,
    and where each trailing flagged streak starts (the stored start when every new sample
    continues it). So each GPU's samples are read backwards from the latest, only as far as
    a streak reaches: for a GPU that is not stalled, one sample, not all of them.
    """
    if not rows:
        return 0
    by_series: dict[SeriesKey, list[Sequence[Any]]] = {}
    series, ts_of = itemgetter(0, 1, 2), itemgetter(_AT["ts"])
    for row in rows:
        key = series(row)
        samples = by_series.get(key)
        if samples is None:
            by_series[key] = [row]
        else:
            samples.append(row)
    run_ids = {key[0] for key in by_series}
    node_ids = {key[1] for key in by_series}
    stored = {
        (s.run_id, s.node_id, s.gpu_index): Streak(s.last_ts, s.hung_since, s.no_process_since)
        for s in GpuStreak.objects.filter(run_id__in=run_ids, node_id__in=node_ids)
    }
    state: dict[SeriesKey, Streak] = {}
    late: dict[SeriesKey, datetime] = {}
    for key, samples in by_series.items():
        samples.sort(key=ts_of)
        streak = stored.get(key, Streak())
        if streak.last_ts is not None and ts_of(samples[0]) <= streak.last_ts:
            if ts_of(samples[-1]) <= streak.last_ts and streak.hung_since is None and streak.no_process_since is None:
                continue  # older samples only, behind a latest one in no streak: nothing trailing changes
            late[key] = max(streak.last_ts, ts_of(samples[-1]))
            continue
        streak.hung_since = trailing_start(samples, _is_hung_row, ts_of, streak.hung_since)
        streak.no_process_since = trailing_start(samples, _no_process_row, ts_of, streak.no_process_since)
        streak.last_ts = ts_of(samples[-1])
        state[key] = streak
    if late:
        state.update(_recompute(late))
    GpuStreak.objects.bulk_create(
        _rows(state),
        update_conflicts=True,
        unique_fields=["run", "node", "gpu_index"],
        update_fields=["last_ts", "hung_since", "no_process_since"],
        batch_size=1000,
    )
    return len(state)


_hung_values = itemgetter(*(_AT[n] for n in STALL_FIELDS[:4]))


def _is_hung_row(row: Sequence[Any]) -> bool:
    return is_hung(*_hung_values(row))


def _no_process_row(row: Sequence[Any]) -> bool:
    return row[_AT["processes"]] == []


def trailing_start(
    samples: Sequence[Sequence[Any]],
    flagged: Callable[[Sequence[Any]], bool],
    ts_of: Callable[[Sequence[Any]], datetime],
    stored_start: datetime | None,
) -> datetime | None:
    """Where the flagged streak `samples` (in time order, all after the stored latest) end in starts:
    None when the latest is unflagged, the stored start when every sample is flagged (Streak.fold's result)."""
    start = None
    for row in reversed(samples):
        if not flagged(row):
            return start
        start = ts_of(row)
    return stored_start or start


def _recompute(latest: dict[SeriesKey, datetime]) -> dict[SeriesKey, Streak]:
    """The streaks of these GPUs from their raw samples of the LOOKBACK up to their latest (two queries)."""
    start = min(latest.values()) - LOOKBACK
    end = max(latest.values())
    read = blocks.raw_rows_of_runs(
        {key[0] for key in latest}, start, end, STALL_FIELDS, node_ids={key[1] for key in latest}
    )
    out: dict[SeriesKey, Streak] = {}
    for run_id, rows in read.items():
        for node_id, gpu, ts, *values in rows:  # in series and time order
            key = (run_id, node_id, gpu)
            if key not in latest or ts < latest[key] - LOOKBACK:
                continue
            out.setdefault(key, Streak()).fold(ts, *_marks(values))
    return out


def _rows(state: dict[SeriesKey, Streak]) -> list[GpuStreak]:
    rows = []
    for (r, n, g), s in state.items():
        assert s.last_ts is not None  # a GPU enters the state with its first sample
        rows.append(GpuStreak(
            run_id=r, node_id=n, gpu_index=g, last_ts=s.last_ts, hung_since=s.hung_since,
            no_process_since=s.no_process_since,
        ))  # fmt: skip
    return rows


def rebuild(run_ids: Sequence[int], now: datetime) -> int:
    """Recompute the streaks of these runs' GPUs from their raw samples of the LOOKBACK before `now`.

    For samples written some other way than `store_sample_rows` (a repair, a restore); ingest
    keeps them current by itself.
    """
    read = blocks.raw_rows_of_runs(run_ids, now - LOOKBACK, now, STALL_FIELDS)
    state: dict[SeriesKey, Streak] = {}
    for run_id, rows in read.items():
        for node_id, gpu, ts, *values in rows:
            state.setdefault((run_id, node_id, gpu), Streak()).fold(ts, *_marks(values))
    GpuStreak.objects.filter(run_id__in=run_ids).delete()
    GpuStreak.objects.bulk_create(
        _rows(state),
        batch_size=1000,
    )
    return len(state)
