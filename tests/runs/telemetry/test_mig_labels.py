"""A MIG instance stored as a GPU of its own reads as `GPU 0 MIG 7` on every page, not as `GPU 1007`.

The importers store instance i of GPU g at index 1000 + 100 g + i (`runs.telemetry.labels.mig_gpu_index`);
the charts already named it; the fleet grid and the stall notices printed the raw index.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from runs.choices import RunStatus
from runs.models import GpuSample, Node
from runs.telemetry.fleet import GpuCell
from runs.telemetry.labels import mig_gpu_index
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

NOW = T0 + timedelta(minutes=45)
MIG_0_7 = mig_gpu_index(0, 7)


def test_fleet_cell_names_a_mig_instance() -> None:
    minute = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
    cell = GpuCell(MIG_0_7, minute, 36.0, 80.0, 2.0e9, 10_000_000_000)
    assert cell.label == "0 MIG 7: 36 · 20"
    assert cell.title.startswith("GPU 0 MIG 7 at 09:30 UTC: avg 36 %")
    plain = GpuCell(3, minute, 36.0, 80.0, None, None)
    assert plain.label.startswith("3: 36") and plain.title.startswith("GPU 3 at 09:30 UTC")


@pytest.mark.django_db
def test_a_stalled_mig_instance_is_named_on_the_run_page(world: World) -> None:
    run = make_run(world.vision, "mig-1", status=RunStatus.RUNNING, ended_at=None)
    node = Node.objects.get(attempt__run=run)
    # Through the ingest store path, which keeps the stall streaks the page reads (runs/telemetry/streaks.py).
    store_gpu_samples(
        [
            GpuSample(
                run=run, node=node, gpu_index=MIG_0_7, ts=NOW - timedelta(minutes=m), utilization_gpu=100, sm_active=1
            )
            for m in range(15, -1, -1)
        ]
    )
    with time_machine.travel(NOW, tick=False):
        page = world.client_for(world.alice).get(f"/runs/{run.pk}/").content.decode()
    assert "node 0 GPU 0 MIG 7" in page
    assert "GPU 1007" not in page
