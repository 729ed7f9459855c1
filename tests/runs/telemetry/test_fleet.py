"""The fleet page: live GPUs of running runs, team-scoped, and utilization history from GpuHour."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.choices import AcceleratorType, RunStatus
from runs.models import GpuHour, GpuSample, Node
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db
NOW = T0 + timedelta(minutes=10)


def running(world_team, external_id: str, utilization: float, **fields):
    """A running 8-GPU run with 10 minutes of 1 Hz telemetry up to NOW."""
    run = make_run(world_team, external_id, status=RunStatus.RUNNING, ended_at=None, **fields)
    node = Node.objects.get(attempt__run=run)
    store_gpu_samples(
        [GpuSample(run=run, node=node, gpu_index=g, ts=T0 + timedelta(seconds=s), utilization_gpu=utilization,
                   memory_used_bytes=40 * 10**9, memory_total_bytes=80 * 10**9)
         for g in range(8) for s in range(0, 600, 5)]
    )  # fmt: skip
    return run


def get_fleet(world: World, user):
    with time_machine.travel(NOW, tick=False):
        return world.client_for(user).get("/runs/fleet/")


def test_fleet_shows_running_gpus_of_the_users_teams_only(world: World) -> None:
    running(world.vision, "vision-train", 91.0)
    running(world.nlp, "nlp-train", 33.0, accelerator_type=AcceleratorType.B300_8)
    finished = make_run(world.vision, "vision-done")
    store_gpu_samples([GpuSample(run=finished, node=Node.objects.get(attempt__run=finished), gpu_index=0, ts=NOW)])

    alice = get_fleet(world, world.alice)
    assert alice.status_code == 200
    body = alice.content.decode()
    assert "vision-train" in body and "nlp-train" not in body and "vision-done" not in body
    # Each cell: "GPU: utilization · memory %", its latest minute in the hover text.
    assert ">3: 91 · 50</span>" in body
    assert 'title="GPU 3 at 09:09 UTC: avg 91 %, max 91 %, memory 50 %"' in body
    assert alice.context["gpu_count"] == 8
    assert alice.context["by_team"]["data"][0]["name"] == "vision"
    assert alice.context["by_team"]["data"][0]["y"] == [91.0]

    charlie = get_fleet(world, world.charlie).content.decode()
    assert "nlp-train" in charlie and "vision-train" not in charlie

    sam = get_fleet(world, world.sam)
    assert sam.context["gpu_count"] == 16
    assert {t["name"] for t in sam.context["by_accelerator"]["data"]} == {"GPU_8xH100", "GPU_8xB300"}


def test_fleet_query_count_is_pinned_and_does_not_grow_with_runs(world: World) -> None:
    running(world.vision, "r0", 50.0)
    client = world.client_for(world.alice)  # logged in before counting: the page's own queries only
    with time_machine.travel(NOW, tick=False):
        with CaptureQueriesContext(connection) as one:
            assert client.get("/runs/fleet/").status_code == 200
        for i in range(1, 6):
            running(world.vision, f"r{i}", 50.0)
        with CaptureQueriesContext(connection) as six:
            response = client.get("/runs/fleet/")
    assert response.context["run_count"] == 6
    # Session, user, the live grid's minutes, the hours by team, accelerator type and hour.
    assert len(one) == 4, [q["sql"][:80] for q in one.captured_queries]
    assert len(six) == len(one)


def test_history_weights_gpu_hours_by_samples_in_both_groupings(world: World) -> None:
    hour = T0.replace(minute=0)
    for team, name, accelerator, samples, avg in [
        (world.vision, "h100", AcceleratorType.H100_8, 3600, 90.0),
        (world.vision, "b300", AcceleratorType.B300_8, 1200, 30.0),
        (world.nlp, "quiet", AcceleratorType.H100_8, 600, None),  # reported, but no utilization
    ]:
        run = make_run(team, name, accelerator_type=accelerator)
        GpuHour.objects.create(run=run, node=Node.objects.get(attempt__run=run), gpu_index=0, hour=hour,
                               samples=samples, utilization_gpu_avg=avg)  # fmt: skip
    sam = get_fleet(world, world.sam).context
    by_team = {t["name"]: t["y"] for t in sam["by_team"]["data"]}
    by_accelerator = {t["name"]: t["y"] for t in sam["by_accelerator"]["data"]}
    assert by_team == {"nlp": [None], "vision": [75.0]}  # (90 x 3600 + 30 x 1200) / 4800
    assert by_accelerator == {"GPU_8xB300": [30.0], "GPU_8xH100": [90.0]}  # the quiet hour weighs nothing
