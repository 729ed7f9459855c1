"""Billed usage of serverless GPU runs as `system.billing.usage` writes it (see tests/data/databricks/SOURCES.md).

tests/data/databricks/billing_usage_ai_runtime.csv has the table's columns in the order of the
recorded statement; list_prices_promotion.csv prices the GPU SKU at a promotion
(`default` 1.00, `effective_list.default` 0.70: pricing at `default` would be 43% too high).
"""

from __future__ import annotations

import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from billing.choices import RecordType
from billing.models import BilledUsage, EgressRecord
from billing.reconcile import compare, importing
from runs.choices import AcceleratorType
from tests.conftest import T0, TESTS, World, make_run

DATA = TESTS / "data" / "databricks"


def _import() -> importing.ImportResult:
    usage_file, prices_file = DATA / "billing_usage_ai_runtime.csv", DATA / "list_prices_promotion.csv"
    with usage_file.open(newline="") as usage, prices_file.open(newline="") as prices:
        return importing.import_usage(usage, prices)


@pytest.fixture
def runs(world: World) -> dict[str, object]:
    one_a10 = {"accelerator_type": AcceleratorType.A10_1, "num_accelerators": 1, "gpus_per_node": 1}
    return {
        "corrected": make_run(world.vision, external_id="5001001"),
        "by_workload": make_run(world.vision, external_id="5002002"),
        "pool_8": make_run(world.nlp, external_id="5003003"),
        "pool_1": make_run(world.nlp, external_id="5004004", **one_a10),
    }


def test_rows_keep_their_product_record_type_and_ai_runtime_ids(runs: dict) -> None:
    result = _import()

    assert result.ok and (result.added, result.linked, result.unpriced) == (8, 7, 0)
    retraction = BilledUsage.objects.get(record_type=RecordType.RETRACTION)
    assert (retraction.billing_origin_product, retraction.usage_type) == ("AI_RUNTIME", "GPU_TIME")
    assert retraction.usage_quantity == Decimal("-10") and retraction.product_features["ai_runtime"] == {
        "compute_type": "on-demand"
    }
    pool = BilledUsage.objects.get(usage_quantity=90)
    assert (pool.ai_runtime_pool_id, pool.run, pool.job_run_id) == ("pool-7", None, "")


def test_usage_is_priced_at_the_effective_list_price(runs: dict) -> None:
    _import()

    prices = set(BilledUsage.objects.filter(usage_unit="DBU").values_list("price_per_unit", flat=True))
    assert prices == {Decimal("0.7")}  # not the 1.00 `default` the promotion overrides


def test_a_retracted_and_restated_record_sums_to_the_corrected_figure(runs: dict) -> None:
    _import()

    figure = compare.billed_for_run(runs["corrected"])
    # 10 - 10 + 8 DBU at 0.70, plus 120 GB of inter-region egress at 0.02.
    assert figure is not None and figure.billed == Decimal("5.6") + Decimal("2.4")
    assert figure.records == 4


def test_a_row_without_a_job_run_id_is_matched_by_its_workload_id(runs: dict) -> None:
    _import()

    row = BilledUsage.objects.get(ai_runtime_workload_id="5002002")
    assert row.job_run_id == "" and row.run == runs["by_workload"]
    assert compare.billed_for_run(runs["by_workload"]).billed == Decimal("2.8")


def test_networking_rows_are_the_runs_billed_egress_by_route(runs: dict) -> None:
    _import()

    figure = compare.billed_for_run(runs["corrected"])
    assert figure.egress == (
        compare.BilledEgress("us-east-1", "us-west-2", Decimal("120"), "GB", Decimal("2.4")),
    )  # fmt: skip


def test_a_reserved_pools_rows_are_split_over_its_runs_by_gpu_seconds(runs: dict) -> None:
    _import()

    figures = compare.per_run([runs["pool_8"], runs["pool_1"]])
    # The pool's 90 DBU x 0.70 = 63.00, split 8 : 1 by GPU-seconds over the same hour.
    assert figures[runs["pool_8"].pk].pool == Decimal("56")
    assert figures[runs["pool_1"].pk].pool == Decimal("7")
    assert figures[runs["pool_8"].pk].billed == Decimal("0.7") + Decimal("56")


def test_a_pool_row_no_run_overlaps_is_not_split(runs: dict) -> None:
    for run in (runs["pool_8"], runs["pool_1"]):
        run.attempts.update(started_at=T0 + timedelta(hours=2), ended_at=T0 + timedelta(hours=3))
    _import()

    assert compare.per_run([runs["pool_8"]])[runs["pool_8"].pk].pool == Decimal("0")


def test_an_unknown_record_type_is_refused_with_its_line(runs: dict) -> None:
    text = (DATA / "billing_usage_ai_runtime.csv").read_text().replace(",RESTATEMENT,", ",CORRECTION,")
    result = importing.import_usage(io.StringIO(text, newline=""))

    assert not result.ok and BilledUsage.objects.count() == 0
    assert [(e.line, e.message) for e in result.errors] == [
        (4, "record_type 'CORRECTION' is not one of ORIGINAL, RETRACTION, RESTATEMENT")
    ]


def test_the_run_page_shows_billed_egress_and_the_pool_share(world: World, runs: dict) -> None:
    _import()
    alice = world.client_for(world.alice)

    page = alice.get(reverse("run_detail", args=[runs["corrected"].pk])).content.decode()
    assert "Billed egress" in page and "us-east-1 → us-west-2: 120 GB, $2.40" in page

    charlie = world.client_for(world.charlie)
    page = charlie.get(reverse("run_detail", args=[runs["pool_8"].pk])).content.decode()
    assert "Includes $56.00 of its reserved pool" in page


def test_the_cost_page_shows_billed_egress_beside_the_estimate_for_the_users_teams_only(
    world: World, runs: dict
) -> None:
    _import()
    # An nlp run's billed egress on another route: never on a vision member's page or CSV.
    BilledUsage.objects.create(
        record_id="nlp-egress", sku_name="PREMIUM_NETWORKING_INTER_REGION_EGRESS_US_EAST_N_VIRGINIA",
        usage_start_time=T0, usage_end_time=T0 + timedelta(hours=1), usage_date=T0.date(),
        usage_quantity=Decimal("300"), usage_unit="GB", billing_origin_product="NETWORKING",
        usage_metadata={"source_region": "us-east-1", "destination_region": "eu-west-1"},
        job_run_id="5003003", run=runs["pool_8"], price_per_unit=Decimal("0.02"), billed_usd=Decimal("6.00"),
        imported_at=T0,
    )  # fmt: skip
    # The derived estimate of the same route: the billed figure sits beside it, on its row.
    EgressRecord.objects.create(
        run=runs["corrected"], source_region="us-east-1", destination_region="us-west-2", bytes=100 * 10**9, ts=T0
    )
    day = T0.date()
    query = {"start": str(day - timedelta(days=1)), "end": str(day + timedelta(days=1))}
    assert BilledUsage.objects.filter(run=runs["corrected"], usage_date=day).exists()

    page = world.client_for(world.alice).get(reverse("cost_overview"), query).content.decode()
    assert "Billed" in page and "$2.40" in page and "(120 GB)" in page
    assert "eu-west-1" not in page and "$6.00" not in page

    export = world.client_for(world.alice).get(reverse("cost_overview"), query | {"format": "csv", "table": "egress"})
    lines = export.content.decode().splitlines()
    assert lines[0].endswith(",billed_quantity,billed_unit,billed_usd")
    route = [line for line in lines[1:] if line.startswith("us-east-1,us-west-2,")]
    assert len(route) == 1 and route[0].startswith("us-east-1,us-west-2,100000000000,0,"), lines
    assert route[0].endswith(",120,GB,2.4")
    assert not any("eu-west-1" in line for line in lines)

    # The same figure the run page shows, from the same rows (one sum, billing.reconcile.compare._egress_routes).
    figure = compare.billed_for_run(runs["corrected"])
    assert figure is not None and [r.billed_usd for r in figure.egress] == [Decimal("2.40")]
    charlie = world.client_for(world.charlie).get(reverse("cost_overview"), query).content.decode()
    assert "eu-west-1" in charlie and "$6.00" in charlie and "(120 GB)" not in charlie
