"""runs/telemetry/retention.py: raw samples past AIRBOARD_TELEMETRY_RAW_DAYS go in batches; rollups stay."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.models import GpuHour, GpuMinute, GpuSample, Node
from runs.telemetry import charts
from runs.telemetry.retention import prune_raw_samples
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


def test_only_old_raw_samples_go_in_batches_and_rollups_stay(world: World, settings) -> None:
    settings.AIRBOARD_TELEMETRY_RAW_DAYS = 14
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    now = T0 + timedelta(days=14, minutes=30)  # cutoff: T0 + 30 minutes
    store_gpu_samples(
        [GpuSample(run=run, node=node, gpu_index=0, ts=T0 + timedelta(seconds=s), utilization_gpu=float(s % 100))
         for s in range(3600)]
    )  # fmt: skip
    minutes, hours = GpuMinute.objects.count(), GpuHour.objects.count()

    with CaptureQueriesContext(connection) as queries:
        result = prune_raw_samples(now=now, batch_size=500)

    assert result.deleted == 1800
    assert result.batches == 4  # 500 + 500 + 500 + 300: each batch a select and a delete
    deletes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("DELETE")]
    assert len(deletes) == 4
    assert GpuSample.objects.count() == 1800
    assert not GpuSample.objects.filter(ts__lt=T0 + timedelta(minutes=30)).exists()
    assert (GpuMinute.objects.count(), GpuHour.objects.count()) == (minutes, hours)
    # The pruned half still charts from its minutes.
    series = charts.gpu_series(run, "utilization_gpu", T0, T0 + timedelta(minutes=10))
    assert series and series[0].tier == "minute" and max(series[0].y) == 99.0
    assert prune_raw_samples(now=now).deleted == 0


def test_max_batches_bounds_one_pass(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    store_gpu_samples([GpuSample(run=run, node=node, gpu_index=0, ts=T0 + timedelta(seconds=s)) for s in range(50)])
    result = prune_raw_samples(now=T0 + timedelta(days=30), batch_size=10, max_batches=2)
    assert (result.deleted, GpuSample.objects.count()) == (20, 30)
