"""Egress a run reports or derives is bounded per run and UTC day by what its GPUs could move (issue 33).

Before: one record of `"bytes": 9223372036854775807` was stored and priced, $830 M.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import time_machine

from billing.costs import egress
from billing.costs.serverless import estimate_run_cost
from billing.models import EgressPrice, EgressRecord
from runs.models import MetricPoint
from runs.telemetry.store import store_metric_points
from tests.conftest import T0, World, make_run, serverless_api

GB = 10**9
# 8 GPUs at 50 Gbit/s each (an HGX node's 2 x 200 GbE north/south) for a day: 50e9 B/s x 86,400 s.
DAY_OF_8_GPUS = 8 * 50 * GB // 8 * 86_400


def _record(ts: datetime = T0, num_bytes: int = 5 * GB, **fields: object) -> dict:
    return {"run": "r1", "source_region": "us-west-2", "destination_region": "us-east-1", "bytes": num_bytes,
            "ts": ts.isoformat(), **fields}  # fmt: skip


def _post(world: World, records: list[dict]):
    return serverless_api(world).post("/api/v1/egress", {"records": records}, content_type="application/json")


def test_the_bound_is_gpus_times_line_rate_times_a_day(settings) -> None:
    assert egress.max_bytes_per_day(8) == DAY_OF_8_GPUS
    settings.AIRBOARD_MAX_EGRESS_GBITS_PER_GPU = 400
    assert egress.max_bytes_per_day(8) == DAY_OF_8_GPUS * 8
    assert egress.max_bytes_per_day(10**9) == 2**63 - 1  # never past what the column holds


@time_machine.travel(T0 + timedelta(days=1), tick=False)
def test_a_record_of_2_63_bytes_is_a_422_naming_it_and_nothing_is_stored(world: World) -> None:
    make_run(world.vision, "r1")  # 8 GPUs
    EgressPrice.objects.create(source_region="us-west-2", destination_region="us-east-1",
                               effective_from=datetime(2026, 1, 1, tzinfo=UTC), usd_per_gb=Decimal("0.02"))  # fmt: skip

    response = _post(world, [_record(), _record(ts=T0 + timedelta(hours=1), num_bytes=9223372036854775807)])

    assert response.status_code == 422, response.content
    errors = response.json()["errors"]
    assert [e["field"] for e in errors] == ["records[1].bytes"]
    assert "8 GPUs could move in a day" in errors[0]["message"]
    assert not EgressRecord.objects.exists()


@time_machine.travel(T0 + timedelta(days=1), tick=False)
def test_the_bound_holds_for_a_day_built_up_over_several_requests(world: World) -> None:
    make_run(world.vision, "r1")
    half = DAY_OF_8_GPUS // 2
    assert _post(world, [_record(num_bytes=half)]).status_code == 201
    assert _post(world, [_record(ts=T0 + timedelta(hours=1), num_bytes=half)]).status_code == 201  # exactly the bound
    response = _post(world, [_record(ts=T0 + timedelta(hours=2), num_bytes=1)])
    assert response.status_code == 422
    # The next UTC day has a bound of its own; a resend of a stored record stays a duplicate.
    assert _post(world, [_record(ts=T0 + timedelta(days=1), num_bytes=half)]).status_code == 201
    again = _post(world, [_record(num_bytes=half)])
    assert again.status_code == 200 and again.json() == {"inserted": 0, "duplicates": 1}


def test_a_counter_of_1e308_is_held_at_what_a_bigint_holds_not_an_overflow() -> None:
    """(1e308 - -1e308) x 1e6 is an infinity in floats: round() of it raised OverflowError in the task."""
    got = egress.counter_increments([(T0, -1e308), (T0 + timedelta(seconds=10), 1e308)])
    assert got == {T0.date(): (2**63 - 1, T0 + timedelta(seconds=10))}


def test_derived_egress_from_a_counter_of_1e30_is_cut_to_the_bound(world: World) -> None:
    run = make_run(world.vision, "far", region="us-east-1", home_region="us-west-2")
    store_metric_points([
        MetricPoint(run=run, key="system/network_receive_megabytes", step=n, ts=T0 + timedelta(seconds=10 * n), value=v)
        for n, v in enumerate([0.0, 1e30])
    ])  # fmt: skip
    assert egress.derive_for_runs([run.pk]) == 1
    assert EgressRecord.objects.get().bytes == DAY_OF_8_GPUS // 2
    EgressPrice.objects.create(source_region="us-west-2", destination_region="us-east-1",
                               effective_from=datetime(2026, 1, 1, tzinfo=UTC), usd_per_gb=Decimal("0.02"))  # fmt: skip
    assert estimate_run_cost(run).egress == Decimal(DAY_OF_8_GPUS // 2) / GB * Decimal("0.02")
