"""The one place that talks to MLflow: a small, batch-first adapter around `MlflowClient`.

The collector (`runs/collectors/mlflow.py`) and the tests see only the plain records below,
never MLflow entities or the client, so an MLflow upgrade touches this file alone.

Incremental reads. MLflow has no "updated since" query, so the adapter offers the three
primitives the collector builds its cursors from:

- `runs_started_since(experiment_ids, since_ms)`: new runs, oldest first, by start time;
- `runs_by_id(...)`: a batch re-read of runs the collector still considers live;
- `metric_history_since(run_id, key, cursor)`: only the points after the cursor.

A metric cursor remembers how many points of the history were read and the last one. The
tracking server returns a history ordered by (timestamp, step, value) and pages it by offset,
so the next read starts one point before the end of what was read; that point must come back
equal to the remembered one (the "anchor"). If it does not (a point was logged with an older
timestamp, or a backend pages differently) the adapter falls back to one full read, and the
caller's idempotent insert drops what it already has.
"""

from __future__ import annotations

import base64
import json
import math
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
from mlflow import MlflowClient
from mlflow.entities import ViewType
from mlflow.exceptions import MlflowException

# Server-side cap of one get-history page (mlflow.store.tracking.MAX_RESULTS_GET_METRIC_HISTORY).
HISTORY_PAGE = 25_000
# search_runs page size; the server caps it at 50,000.
RUNS_PAGE = 1_000
# Run ids per `attributes.run_id IN (...)` filter: keeps the filter string (a URL parameter) short.
RUN_ID_CHUNK = 100
# The reachability probe must fail fast: MlflowClient itself retries a refused connection
# with backoff for minutes (MLFLOW_HTTP_REQUEST_MAX_RETRIES), longer than a collector pass.
PROBE_TIMEOUT_SECONDS = 5


class MlflowSourceError(Exception):
    """MLflow could not be reached or refused a request; the message says which and why."""


@dataclass(frozen=True)
class Experiment:
    """An MLflow experiment: its id and name."""

    id: str
    name: str


@dataclass(frozen=True)
class MetricValue:
    """One logged value of one metric; `value` may be NaN or infinite, as MLflow stores it."""

    key: str
    value: float
    timestamp_ms: int
    step: int

    def same_as(self, other: MetricValue) -> bool:
        """Equal, counting NaN as equal to NaN (a NaN anchor must still match itself)."""
        if (self.key, self.timestamp_ms, self.step) != (other.key, other.timestamp_ms, other.step):
            return False
        if math.isnan(self.value) or math.isnan(other.value):
            return math.isnan(self.value) and math.isnan(other.value)
        return self.value == other.value


@dataclass(frozen=True)
class RunRecord:
    """An MLflow run as search_runs returns it, with the latest value of each metric."""

    run_id: str
    experiment_id: str
    run_name: str
    status: str
    start_time_ms: int | None
    end_time_ms: int | None
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    latest: dict[str, MetricValue] = field(default_factory=dict)


@dataclass(frozen=True)
class MetricCursor:
    """How far one metric's history was read: `count` points, the last of them `last`.

    `latest` is the run's latest value of the metric (MLflow's own summary) when it was read:
    while it is unchanged the history has nothing new and is not asked for at all.
    """

    count: int
    last: MetricValue
    latest: MetricValue | None = None

    def to_json(self) -> dict[str, Any]:
        return {"n": self.count, "last": _value_to_json(self.last), "latest": _value_to_json(self.latest)}

    @classmethod
    def from_json(cls, key: str, data: dict[str, Any] | None) -> MetricCursor | None:
        """The cursor stored in MlflowRun.metric_cursors[key], or None for a missing or odd one."""
        if data is None:
            return None
        try:
            return cls(
                count=int(data["n"]),
                last=_value_from_json(key, data["last"]),
                latest=_value_from_json(key, data["latest"]) if data.get("latest") else None,
            )
        except (KeyError, TypeError, ValueError):
            return None


def _value_to_json(value: MetricValue | None) -> list[Any] | None:
    if value is None:
        return None
    # JSON has no NaN: keep it as a string so the anchor comparison still works.
    number: Any = value.value if math.isfinite(value.value) else repr(value.value)
    return [value.timestamp_ms, value.step, number]


def _value_from_json(key: str, data: list[Any]) -> MetricValue:
    timestamp_ms, step, number = data
    return MetricValue(key=key, value=float(number), timestamp_ms=int(timestamp_ms), step=int(step))


class MlflowSource:
    """Batch reads from one MLflow tracking server (or store URI)."""

    def __init__(self, tracking_uri: str) -> None:
        self.tracking_uri = tracking_uri
        self._client = MlflowClient(tracking_uri=tracking_uri)

    # --- health -----------------------------------------------------------------------

    def check_reachable(self) -> None:
        """Fail fast, with a clear message, when an HTTP tracking server does not answer.

        Only connection failures count: any HTTP answer (even 404 from a proxy without
        /health) means something is listening, and the real calls report their own errors.
        """
        parts = urlsplit(self.tracking_uri)
        if parts.scheme not in {"http", "https"}:
            return
        try:
            requests.get(self.tracking_uri.rstrip("/") + "/health", timeout=PROBE_TIMEOUT_SECONDS)
        except requests.RequestException as exc:
            raise MlflowSourceError(
                f"MLflow tracking server {self.tracking_uri} is unreachable ({type(exc).__name__}: {exc})"
            ) from exc

    # --- experiments and runs ---------------------------------------------------------

    def experiments(self, wanted: Sequence[str] = ()) -> tuple[list[Experiment], list[str]]:
        """Active experiments, limited to `wanted` ids or names when given; also the wanted ones not found."""
        found = [
            Experiment(id=str(e.experiment_id), name=e.name)
            for e in self._paged(
                lambda token: self._client.search_experiments(
                    view_type=ViewType.ACTIVE_ONLY, max_results=RUNS_PAGE, page_token=token
                )
            )
        ]
        if not wanted:
            return found, []
        wanted_set = set(wanted)
        chosen = [e for e in found if e.id in wanted_set or e.name in wanted_set]
        seen = {e.id for e in chosen} | {e.name for e in chosen}
        return chosen, [w for w in wanted if w not in seen]

    def runs_started_since(self, experiment_ids: Sequence[str], since_ms: int | None) -> list[RunRecord]:
        """Runs of these experiments started at or after `since_ms` (all when None), oldest first.

        Inclusive on purpose: runs sharing the boundary millisecond are read again rather than missed.
        """
        if not experiment_ids:
            return []
        filter_string = f"attributes.start_time >= {int(since_ms)}" if since_ms is not None else ""
        return self._search(list(experiment_ids), filter_string, order_by=["attributes.start_time ASC"])

    def runs_by_id(self, experiment_ids: Sequence[str], run_ids: Sequence[str]) -> list[RunRecord]:
        """A batch re-read of known runs (those still running, those linked since); deleted ones are absent."""
        records: list[RunRecord] = []
        ids = sorted(set(run_ids))
        for start in range(0, len(ids), RUN_ID_CHUNK):
            chunk = ids[start : start + RUN_ID_CHUNK]
            # Run ids are 32 hex characters; quoting is safe, and anything else is ignored.
            quoted = ", ".join(f"'{run_id}'" for run_id in chunk if run_id.isalnum())
            if quoted:
                records += self._search(sorted(set(experiment_ids)), f"attributes.run_id IN ({quoted})")
        return records

    def _search(
        self, experiment_ids: list[str], filter_string: str, order_by: list[str] | None = None
    ) -> list[RunRecord]:
        runs = self._paged(
            lambda token: self._client.search_runs(
                experiment_ids=experiment_ids,
                filter_string=filter_string,
                run_view_type=ViewType.ACTIVE_ONLY,
                max_results=RUNS_PAGE,
                order_by=order_by,
                page_token=token,
            )
        )
        return [_run_record(run) for run in runs]

    # --- metric histories -------------------------------------------------------------

    def metric_history_since(
        self, run_id: str, key: str, cursor: MetricCursor | None, latest: MetricValue | None = None
    ) -> tuple[list[MetricValue], MetricCursor | None]:
        """The points of `key` logged after `cursor`, and the cursor to store once they are saved.

        1. With a cursor, read from offset count-1: the first point must equal the cursor's
           last one; then the rest are exactly the new points.
        2. Otherwise (no cursor, a refused offset, a moved anchor), read the whole history once.
        `latest` is the run's current latest value of `key`, remembered in the new cursor.
        """
        if cursor is not None and cursor.count > 0:
            resumed = self._history_from(run_id, key, cursor.count - 1)
            if resumed and resumed[0].same_as(cursor.last):
                new = resumed[1:]
                last = new[-1] if new else cursor.last
                return new, MetricCursor(count=cursor.count + len(new), last=last, latest=latest)
        points = self._history_from(run_id, key, 0) or []
        if not points:
            return [], None
        return points, MetricCursor(count=len(points), last=points[-1], latest=latest)

    def _history_from(self, run_id: str, key: str, offset: int) -> list[MetricValue] | None:
        """History from `offset` on, paged; None when the store refuses the offset token."""
        store = self._store()
        token = _offset_token(offset) if offset else None
        points: list[MetricValue] = []
        with self._errors(f"metric history of {run_id}/{key}"):
            while True:
                try:
                    page = store.get_metric_history(run_id, key, max_results=HISTORY_PAGE, page_token=token)
                except MlflowException:
                    if token is not None and not points and offset:
                        return None  # a backend with other page tokens: the caller reads it all
                    raise
                points += [_metric_value(m) for m in page]
                token = getattr(page, "token", None)
                if not token:
                    return points

    # --- artifacts --------------------------------------------------------------------

    def artifact_paths(self, run_id: str, path: str) -> list[str]:
        """Paths of the files and folders directly under `path` among a run's artifacts."""
        with self._errors(f"the artifacts of run {run_id}"):
            return [item.path for item in self._client.list_artifacts(run_id, path)]

    def artifact_text(self, run_id: str, path: str) -> str:
        """One artifact file as text (bad bytes replaced), through a temporary download."""
        with self._errors(f"artifact {path} of run {run_id}"), tempfile.TemporaryDirectory() as tmp:
            local = self._client.download_artifacts(run_id, path, tmp)
            return Path(local).read_bytes().decode("utf-8", "replace")

    def _store(self) -> Any:
        # MlflowClient.get_metric_history hides paging; the tracking store (MLflow's narrow,
        # documented AbstractStore interface) exposes max_results and page_token.
        return self._client._tracking_client.store

    # --- helpers ----------------------------------------------------------------------

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except requests.RequestException as exc:
            raise MlflowSourceError(f"MLflow {self.tracking_uri} unreachable reading {what}: {exc}") from exc
        except MlflowException as exc:
            raise MlflowSourceError(f"MLflow {self.tracking_uri} failed reading {what}: {exc.message}") from exc

    def _paged(self, call: Callable[[str | None], Any]) -> list[Any]:
        items: list[Any] = []
        token: str | None = None
        with self._errors("experiments and runs"):
            while True:
                page = call(token)
                items += list(page)
                token = page.token
                if not token:
                    return items


def _offset_token(offset: int) -> str:
    # The token the SQL tracking store (behind `mlflow server`) itself hands out for this
    # offset. MLflow calls its format unstable, hence the anchor check and the fallback.
    return base64.b64encode(json.dumps({"offset": offset}).encode()).decode()


def _metric_value(metric: Any) -> MetricValue:
    return MetricValue(
        key=metric.key, value=float(metric.value), timestamp_ms=int(metric.timestamp), step=int(metric.step)
    )


def _run_record(run: Any) -> RunRecord:
    info, data = run.info, run.data
    # RunData.metrics holds bare values; the Metric objects carry the timestamp and step.
    latest = {m.key: _metric_value(m) for m in data._metric_objs}
    return RunRecord(
        run_id=info.run_id,
        experiment_id=str(info.experiment_id),
        run_name=info.run_name or "",
        status=info.status or "",
        start_time_ms=info.start_time,
        end_time_ms=info.end_time,
        params=dict(data.params),
        tags=dict(data.tags),
        latest=latest,
    )
