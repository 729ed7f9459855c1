"""Egress records: reported through the API (idempotent, scoped) and derived for cross-region runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.test import Client

from billing.choices import EgressOrigin
from billing.costs import egress, rollups
from billing.costs.serverless import estimate_run_cost
from billing.models import AcceleratorPrice, CostDaily, EgressPrice, EgressRecord
from runs.choices import BatchStatus
from runs.models import IngestBatch, MetricPoint, Run
from runs.telemetry.store import store_metric_points
from tests.conftest import T0, World, make_run, serverless_api, wait_for

BOOK = datetime(2026, 1, 1, tzinfo=UTC)
GB = 10**9


def _record(run: str = "r1", ts: datetime = T0, num_bytes: int = 5 * GB, **fields: object) -> dict:
    body = {"run": run, "source_region": "us-west-2", "destination_region": "us-east-1", "bytes": num_bytes,
            "ts": ts.isoformat()}  # fmt: skip
    body.update(fields)
    return body


def _post(world: World, records: list[dict], team=None):
    api = serverless_api(world, team)
    return api.post("/api/v1/egress", {"records": records}, content_type="application/json")


@time_machine.travel(T0 + timedelta(days=1), tick=False)
def test_reported_records_are_stored_once_and_a_changed_resend_is_a_409(world: World) -> None:
    make_run(world.vision, "r1")
    first = _post(world, [_record(), _record(ts=T0 + timedelta(minutes=30), num_bytes=GB)])
    assert first.status_code == 201, first.content
    assert first.json() == {"inserted": 2, "duplicates": 0}
    again = _post(world, [_record()])
    assert (again.status_code, again.json()) == (200, {"inserted": 0, "duplicates": 1})
    changed = _post(world, [_record(ts=T0 + timedelta(hours=2)), _record(num_bytes=6 * GB)])
    assert changed.status_code == 409
    assert changed.json()["errors"] == [
        {"field": "records[1].bytes", "message": f"already stored with {5 * GB} bytes, not {6 * GB}"}
    ]
    # Nothing of the conflicting batch was stored, not even its new first row.
    assert sorted(EgressRecord.objects.values_list("bytes", flat=True)) == [GB, 5 * GB]


@time_machine.travel(T0 + timedelta(days=1), tick=False)
def test_bad_rows_are_named_and_nothing_is_stored(world: World) -> None:
    make_run(world.vision, "r1")
    make_run(world.nlp, "nlp-run")
    response = _post(world, [
        _record(),
        _record(run="nlp-run"),
        _record(destination_region="us-west-2"),
        _record(ts=T0 + timedelta(days=3)),
    ])  # fmt: skip
    assert response.status_code == 422
    fields = [e["field"] for e in response.json()["errors"]]
    assert fields == ["records[1].run", "records[2].destination_region", "records[3].ts"]
    for bad in (_record(num_bytes=-1), _record(source_region=""), _record(source_region="Mars"), {"run": "r1"}):
        assert _post(world, [bad]).status_code == 422, bad
    assert _post(world, []).status_code == 422
    assert not EgressRecord.objects.exists()


@time_machine.travel(T0 + timedelta(days=1), tick=False)
def test_another_team_cannot_report_on_a_run(world: World) -> None:
    make_run(world.vision, "r1")
    response = _post(world, [_record()], team=world.nlp)
    assert response.status_code == 422
    assert response.json()["errors"][0]["message"] == "no run 'r1' (serverless) in your team"
    assert world.api(world.vision).get("/api/v1/egress").status_code == 405
    assert Client().post("/api/v1/egress", {"records": [_record()]}, content_type="application/json").status_code == 401


def test_reported_egress_reaches_the_rollup_priced_by_its_pair(world: World) -> None:
    AcceleratorPrice.objects.create(accelerator_type="GPU_8xH100", region="us-west-2", effective_from=BOOK,
                                    usd_per_hour="2.00")  # fmt: skip
    EgressPrice.objects.create(source_region="us-west-2", destination_region="us-east-1", effective_from=BOOK,
                               usd_per_gb="0.02", usd_per_gb_processing="0.005")  # fmt: skip
    with time_machine.travel(T0 + timedelta(days=1), tick=False):
        make_run(world.vision, "r1")
        rollups.refresh_changed()
    with time_machine.travel(T0 + timedelta(days=1, minutes=10), tick=False):
        assert _post(world, [_record(num_bytes=10 * GB)]).status_code == 201
        rollups.refresh_changed()
    row = CostDaily.objects.get()
    assert row.egress_usd == Decimal("0.25")  # 10 GB x ($0.02 + $0.005)
    assert row.compute_usd == Decimal("16")


# --- Derived from MLflow network metrics ------------------------------------------------------


def test_counter_increments_ignore_the_baseline_and_resets() -> None:
    t = [T0 + timedelta(seconds=10 * n) for n in range(6)]
    # Since boot (old MLflow): 9000 MB already there; then +2.5, +0 , a reset to 0.5, then +1.
    points = [(t[0], 9000.0), (t[1], 9002.5), (t[2], None), (t[3], 9002.5), (t[4], 0.5), (t[5], 1.5)]
    assert egress.counter_increments(points) == {T0.date(): (3_500_000, t[5])}
    across = [(T0 - timedelta(seconds=5), 1.0), (T0 + timedelta(seconds=5), 4.0)]
    assert egress.counter_increments(across) == {T0.date(): (3_000_000, T0 + timedelta(seconds=5))}


def _network(run, key: str, values: list[float], start: datetime = T0) -> None:
    store_metric_points([
        MetricPoint(run=run, key=key, step=n, ts=start + timedelta(seconds=10 * n), value=v)
        for n, v in enumerate(values)
    ])  # fmt: skip


def test_cross_region_run_gets_derived_egress_per_direction_and_day(world: World) -> None:
    run = make_run(world.vision, "far", region="us-east-1", home_region="us-west-2",
                   started_at=T0.replace(hour=23, minute=59), ended_at=T0 + timedelta(days=1, hours=1))  # fmt: skip
    late = T0.replace(hour=23, minute=59, second=40)
    _network(run, "system/node_0/network_receive_megabytes", [0.0, 1000.0, 3000.0, 3500.0], start=late)
    _network(run, "system/node_1/network_receive_megabytes", [0.0, 500.0], start=late)
    _network(run, "system/network_transmit_megabytes", [10.0, 250.0], start=late)
    _network(run, "system/cpu_utilization_percentage", [10.0, 90.0], start=late)
    assert egress.derive_for_runs([run.pk]) == 1
    got = sorted(EgressRecord.objects.values_list("source_region", "destination_region", "ts", "bytes", "origin"))
    day2 = T0.replace(hour=0) + timedelta(days=1)
    assert got == [
        # Node 0's +1000 MB at 23:59:50 and node 1's +500 MB at 23:59:50 fall on day 1.
        ("us-east-1", "us-west-2", late + timedelta(seconds=10), 240 * 10**6, EgressOrigin.DERIVED),
        ("us-west-2", "us-east-1", late + timedelta(seconds=10), 1500 * 10**6, EgressOrigin.DERIVED),
        ("us-west-2", "us-east-1", day2.replace(second=10), 2500 * 10**6, EgressOrigin.DERIVED),
    ]
    # Derived again from the same points: nothing changes, nothing is rewritten.
    ids = set(EgressRecord.objects.values_list("pk", flat=True))
    assert egress.derive_for_runs([run.pk]) == 0
    assert set(EgressRecord.objects.values_list("pk", flat=True)) == ids


def test_same_region_runs_get_none_and_reported_records_replace_derived(world: World) -> None:
    home = make_run(world.vision, "home")
    _network(home, "system/network_receive_megabytes", [0.0, 100.0])
    far = make_run(world.vision, "far", region="us-east-1", home_region="us-west-2")
    _network(far, "system/network_receive_megabytes", [0.0, 100.0])
    assert egress.derive_for_runs([home.pk, far.pk]) == 1
    assert list(EgressRecord.objects.values_list("run__external_id", flat=True)) == ["far"]
    with time_machine.travel(T0 + timedelta(days=1), tick=False):
        assert _post(world, [_record(run="far", num_bytes=GB)]).status_code == 201
    assert list(EgressRecord.objects.values_list("origin", "bytes")) == [(EgressOrigin.REPORTED, GB)]
    assert egress.derive_for_runs([far.pk]) == 0  # a run with reported egress is never estimated
    assert EgressRecord.objects.count() == 1


def test_derived_egress_is_priced_and_follows_the_run_becoming_cross_region(world: World) -> None:
    AcceleratorPrice.objects.create(accelerator_type="GPU_8xH100", region="us-east-1", effective_from=BOOK,
                                    usd_per_hour="2.00")  # fmt: skip
    EgressPrice.objects.create(source_region="us-west-2", destination_region="us-east-1", effective_from=BOOK,
                               usd_per_gb="0.02")  # fmt: skip
    with time_machine.travel(T0 + timedelta(days=1), tick=False):
        run = make_run(world.vision, "moved", region="us-west-2", home_region="us-west-2")
        _network(run, "system/network_receive_megabytes", [0.0, 50_000.0])
        rollups.refresh_changed()
        assert not EgressRecord.objects.exists()
    with time_machine.travel(T0 + timedelta(days=1, minutes=10), tick=False):
        # The run source learns the GPUs were in us-east-1 after all.
        run.region = "us-east-1"
        run.save()
        rollups.refresh_changed()
    assert estimate_run_cost(run, now=T0 + timedelta(days=2)).egress == Decimal("1")  # 50 GB x $0.02
    assert CostDaily.objects.get().egress_usd == Decimal("1")


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_network_metrics_pushed_through_the_api_derive_egress_in_the_worker(world: World, celery_worker) -> None:
    make_run(world.vision, "far", region="us-east-1", home_region="us-west-2")
    points = [
        {"run": "far", "key": "system/network_receive_megabytes", "step": n, "ts": (T0 + timedelta(seconds=10 * n))
         .isoformat(), "value": 1000.0 * n}
        for n in range(4)
    ]  # fmt: skip
    response = serverless_api(world).post("/api/v1/metrics", {"points": points}, content_type="application/json")
    assert response.status_code == 202, response.content
    batch_id = response.json()["id"]
    done = IngestBatch.objects.filter(pk=batch_id, status=BatchStatus.DONE)
    assert wait_for(done.exists, timeout=60), celery_worker.log()
    # The worker derives egress after it marks the batch done (so a derivation error never leaves
    # stored points pending): the record follows the status by a moment.
    assert wait_for(EgressRecord.objects.exists, timeout=30), celery_worker.log()
    record = EgressRecord.objects.get()
    assert (record.source_region, record.destination_region, record.bytes) == ("us-west-2", "us-east-1", 3 * GB)


@time_machine.travel(T0 + timedelta(days=1), tick=False)
def test_run_page_lists_egress_records_and_marks_estimates(world: World) -> None:
    EgressPrice.objects.create(source_region="us-west-2", destination_region="us-east-1", effective_from=BOOK,
                               usd_per_gb="0.02")  # fmt: skip
    far = make_run(world.vision, "far", region="us-east-1", home_region="us-west-2")
    _network(far, "system/network_receive_megabytes", [0.0, 2500.0])
    egress.derive_for_runs([far.pk])
    body = world.client_for(world.alice).get(f"/runs/{far.pk}/").content.decode()
    assert 'class="table compact egress-lines"' in body
    assert "2.500" in body and "$0.05" in body and ">estimated</span>" in body
    # Another team's member never sees the run, its egress included.
    assert world.client_for(world.charlie).get(f"/runs/{far.pk}/").status_code == 404


def test_a_batch_rewrites_only_the_days_it_touched_measured_from_the_day_before(world: World) -> None:
    run = make_run(world.vision, "long", region="us-east-1", home_region="us-west-2")
    key = "system/network_receive_megabytes"
    day1, day2 = T0.replace(hour=22), T0.replace(hour=0) + timedelta(days=1, hours=1)
    _network(run, key, [100.0, 300.0], start=day1)  # +200 MB on day 1
    assert egress.derive_for_runs([run.pk], days={run.pk: {day1.date()}}) == 1
    first = EgressRecord.objects.get()
    _network(run, key, [700.0, 1000.0], start=day2)  # +400 MB from day 1's last value, then +300
    assert egress.derive_for_runs([run.pk], days={run.pk: {day2.date()}}) == 1
    by_day = {r.ts.date(): r for r in EgressRecord.objects.all()}
    assert by_day[day1.date()].pk == first.pk  # day 1 was not rewritten
    assert by_day[day2.date()].bytes == 700 * 10**6
    # The same result as deriving the whole history at once.
    ids = {r.pk for r in by_day.values()}
    assert egress.derive_for_runs([run.pk]) == 0
    assert {r.pk for r in EgressRecord.objects.all()} == ids


def test_the_rollup_pass_rederives_only_runs_whose_regions_changed(world: World) -> None:
    run = make_run(world.vision, "far", region="us-east-1", home_region="us-west-2")
    _network(run, "system/network_receive_megabytes", [0.0, 100.0])
    assert egress.rederive_where_region_changed([run.pk]) == 1  # cross-region, nothing derived yet
    # Records that fit its regions are left to the batches: a new point is not re-read here.
    _network(run, "system/network_receive_megabytes", [150.0], start=T0 + timedelta(minutes=5))
    assert egress.rederive_where_region_changed([run.pk]) == 0
    assert EgressRecord.objects.get().bytes == 100 * 10**6
    # The GPU region is corrected: the pair no longer fits, so the run is derived in full again.
    Run.objects.filter(pk=run.pk).update(region="us-east-2")
    assert egress.rederive_where_region_changed([run.pk]) == 1
    record = EgressRecord.objects.get()
    assert (record.source_region, record.destination_region, record.bytes) == ("us-west-2", "us-east-2", 150 * 10**6)
    # Back in its home region: the estimate goes.
    Run.objects.filter(pk=run.pk).update(region="us-west-2")
    assert egress.rederive_where_region_changed([run.pk]) == 1
    assert not EgressRecord.objects.exists()
