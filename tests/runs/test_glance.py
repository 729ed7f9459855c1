"""At a glance (runs.glance): utilization sparkline, staleness and cost so far in the run tables."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.urls import reverse

from billing.engine import run_cost
from billing.models import AcceleratorPrice
from billing.templatetags.billing_tags import usd
from runs import glance
from runs.choices import RunStatus
from runs.models import GpuSample
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db
NOW = T0 + timedelta(hours=2)


def samples(run, minutes: range, util: float) -> None:
    node = run.attempts.get().nodes.get()
    store_gpu_samples(
        [
            GpuSample(run=run, node=node, gpu_index=gpu, ts=NOW - timedelta(minutes=m, seconds=s), utilization_gpu=util)
            for m in minutes
            for s in (5, 35)
            for gpu in (0, 1)
        ]
    )


def test_sparkline_breaks_at_a_gap_and_says_how_old_the_last_sample_is(world: World) -> None:
    run = make_run(world.vision, status=RunStatus.RUNNING, ended_at=None)
    samples(run, range(40, 50), 90.0)  # 50 to 40 minutes ago
    samples(run, range(10, 20), 30.0)  # a 20-minute gap, then 20 to 10 minutes ago
    found = glance.glances([run], now=NOW)[run.pk]
    assert len(found.segments) == 2
    assert found.last_utilization == pytest.approx(30.0)
    assert found.stale and NOW - found.last_sample_at == timedelta(minutes=10)
    # The sparkline's y is 24 - 24 * util / 100: 90 % sits near the top, 30 % lower.
    assert all(p.endswith(",2.4") for p in found.segments[0].split())
    assert all(p.endswith(",16.8") for p in found.segments[1].split())


def test_runs_table_and_active_now_show_utilization_and_the_engines_cost(world: World) -> None:
    # $2.50 per accelerator-hour, 8 accelerators, 2 h running at NOW: $40.00 so far.
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=T0 - timedelta(days=30), usd_per_hour="2.50"
    )
    run = make_run(world.vision, status=RunStatus.RUNNING, ended_at=None)
    samples(run, range(0, 3), 77.0)
    client = world.client_for(world.alice)
    with time_machine.travel(NOW, tick=False):
        expected = usd(run_cost(run, now=NOW).estimate.usd)
        for url in (reverse("run_list"), reverse("overview")):
            html = client.get(url).content.decode()
            assert '<svg class="sparkline"' in html and "77%" in html, url
            assert expected == "$40.00" and expected in html, url
            assert re.search(r"last sample (now|[^<]*ago)", html), url
            assert "stale:" not in html, url


def test_a_running_run_without_samples_says_so(world: World) -> None:
    make_run(world.vision, status=RunStatus.RUNNING, ended_at=None)
    with time_machine.travel(NOW, tick=False):
        html = world.client_for(world.alice).get(reverse("run_list")).content.decode()
    assert "no samples this hour" in html and "no sample yet" in html


def test_run_page_states_coverage_and_staleness(world: World) -> None:
    run = make_run(world.vision, status=RunStatus.RUNNING, ended_at=None)
    samples(run, range(10, 20), 60.0)
    run.attempts.get().nodes.create(index=1, host="10.0.0.9")  # a second node that never reported
    found = glance.coverage(run, now=NOW)
    assert (found.nodes_reporting, found.nodes, found.partial, found.stale) == (1, 2, True, True)
    assert found.last == NOW - timedelta(minutes=10)
    with time_machine.travel(NOW, tick=False):
        html = world.client_for(world.alice).get(reverse("run_detail", args=[run.pk])).content.decode()
    assert "Samples from 1 of 2 nodes (the others sent none)" in html
    assert "<strong>Stale:</strong> Last sample 10\xa0minutes ago." in html


def test_each_silent_run_gets_its_own_last_sample(world: World) -> None:
    # Runs with no minute in the last hour are looked up one newest-minute probe each: every
    # run keeps its own answer, and a run that never reported has none.
    recent = make_run(world.vision, "recent", status=RunStatus.RUNNING, ended_at=None)
    samples(recent, range(2, 4), 50.0)
    hours_ago = make_run(world.vision, "hours-ago", status=RunStatus.RUNNING, ended_at=None)
    samples(hours_ago, range(180, 190), 60.0)  # 3 h 10 min to 3 h ago
    day_ago = make_run(world.vision, "day-ago", status=RunStatus.FAILED)
    samples(day_ago, range(1440, 1445), 70.0)
    never = make_run(world.vision, "never", status=RunStatus.RUNNING, ended_at=None)
    found = glance.glances([recent, hours_ago, day_ago, never], now=NOW)
    assert NOW - found[recent.pk].last_sample_at == timedelta(minutes=2)
    assert NOW - found[hours_ago.pk].last_sample_at == timedelta(minutes=180)
    assert NOW - found[day_ago.pk].last_sample_at == timedelta(minutes=1440)
    assert found[never.pk].last_sample_at is None
    assert found[hours_ago.pk].stale and not found[day_ago.pk].stale and found[never.pk].stale
    assert not found[hours_ago.pk].has_series and found[recent.pk].has_series
