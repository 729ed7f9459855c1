"""runs.telemetry.stalls: a hung collective (busy utilization, idle SMs or power) and GPUs with no process."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine

from billing.models import AcceleratorPrice
from runs.choices import AcceleratorType, RunStatus, StallKind
from runs.models import GpuSample, Node, Run
from runs.telemetry.stalls import gpu_stalls, is_hung, run_stalls
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

NOW = T0 + timedelta(minutes=45)


def running(world: World) -> Run:
    return make_run(world.vision, "live-1", status=RunStatus.RUNNING, ended_at=None)


def samples(run: Run, minutes: int, gpu: int = 0, until: int = 0, **values: object) -> None:
    """One sample a minute from `minutes` to `until` minutes before NOW, through the ingest store path."""
    node = Node.objects.get(attempt__run=run)
    store_gpu_samples(
        [
            GpuSample(run=run, node=node, gpu_index=gpu, ts=NOW - timedelta(minutes=m), **values)
            for m in range(minutes, until - 1, -1)
        ]
    )


def test_signature() -> None:
    assert is_hung(100, 2, 400, 700)
    assert is_hung(95, None, 150, 700)  # no SM activity reported: power says idle
    assert not is_hung(95, 60, 650, 700)  # real work
    assert not is_hung(40, 1, 100, 700)  # not reported busy
    assert not is_hung(100, None, None, None)  # nothing to judge by


@pytest.mark.django_db
def test_hung_collective_flagged_after_ten_minutes_with_cost(world: World) -> None:
    AcceleratorPrice.objects.create(
        accelerator_type=AcceleratorType.H100_8, region="us-west-2", effective_from=T0 - timedelta(days=1),
        usd_per_hour="6.00", kind="list", source="test",
    )  # fmt: skip
    run = running(world)
    samples(run, 12, gpu=0, utilization_gpu=100, sm_active=1, power_watts=120, power_limit_watts=700, processes=[{}])
    samples(run, 12, gpu=1, utilization_gpu=100, sm_active=70, power_watts=600, power_limit_watts=700, processes=[{}])
    with time_machine.travel(NOW, tick=False):
        found = run_stalls([run])
    assert len(found) == 1
    stall = found[0]
    assert stall.kind == StallKind.HUNG and [g.gpu_index for g in stall.gpus] == [0]
    assert stall.minutes == 12
    assert stall.cost == Decimal("1.20")  # $6/h x 12 GPU-minutes


@pytest.mark.django_db
def test_short_or_recovered_stall_not_flagged(world: World) -> None:
    run = running(world)
    samples(run, 8, gpu=0, utilization_gpu=100, sm_active=1)  # under ten minutes
    samples(run, 20, gpu=1, until=1, utilization_gpu=100, sm_active=1)
    samples(run, 0, gpu=1, utilization_gpu=100, sm_active=80)  # recovered now
    assert gpu_stalls(run, NOW) == []


@pytest.mark.django_db
def test_silent_agent_not_flagged(world: World) -> None:
    run = running(world)
    samples(run, 20, gpu=0, utilization_gpu=100, sm_active=1)
    assert gpu_stalls(run, NOW + timedelta(minutes=10)) == []


@pytest.mark.django_db
def test_gpu_with_no_process(world: World) -> None:
    run = running(world)
    samples(run, 15, gpu=2, utilization_gpu=0, processes=[])
    samples(run, 15, gpu=3, utilization_gpu=0, processes=None)  # not collected: unknown, not idle
    found = gpu_stalls(run, NOW)
    assert [(g.kind, g.gpu_index) for g in found] == [(StallKind.NO_PROCESS, 2)]
    with time_machine.travel(NOW, tick=False):
        assert run_stalls([run])[0].cost is None  # no price in the book


@pytest.mark.django_db
def test_finished_run_never_flagged(world: World) -> None:
    run = make_run(world.vision, "done-1")
    samples(run, 15, gpu=0, utilization_gpu=100, sm_active=1)
    assert run_stalls([run], NOW) == []


@pytest.mark.django_db
def test_run_page_and_overview_show_stall(world: World) -> None:
    run = running(world)
    samples(run, 15, gpu=0, utilization_gpu=100, sm_active=1)
    client = world.client_for(world.alice)
    with time_machine.travel(NOW, tick=False):
        page = client.get(f"/runs/{run.pk}/").content.decode()
        overview = client.get("/").content.decode()
    assert "Busy but doing no work" in page and "node 0 GPU 0" in page
    assert 'id="stalls"' in overview and "live-1" in overview
