"""Costs API: `GET /api/v1/costs`, the daily rollups summed by one dimension.

Scoped like every read: a key sees its team's costs, a user their teams' (staff: all).
Amounts are exact decimals sent as strings, so no float ever rounds a cent.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Annotated, Literal

from django.http import HttpRequest
from django.utils import timezone
from ninja import Query, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import BaseModel, Field, field_validator

from billing import engine
from billing.choices import GroupBy
from billing.costs import egress, reports, spend
from billing.prices.money import estimate
from dashboard.api import fair_ingest
from dashboard.api.core import Access, InvalidRows, batch_runs, bearer, read_auth
from dashboard.kit.schemas import ERRORS, ExternalId, RegionName, Timestamp, refuse_nul
from runs.choices import RunSource

router = Router(tags=["costs"])

GroupByName = Literal[
    "team", "accelerator_type", "region", "experiment_name", "creator", "usage_policy_name", "day"
]  # fmt: skip
# Without dates the API answers the last 30 days, today included.
DEFAULT_DAYS = 30


class CostQueryIn(Schema):
    group_by: GroupByName = "team"
    from_: date | None = Field(None, alias="from")
    to: date | None = None
    accelerator_type: str = ""
    region: str = ""


class CostRowOut(Schema):
    key: str
    compute_usd: str
    egress_usd: str
    idle_usd: str
    total_usd: str
    gpu_hours: str
    idle_gpu_hours: str


class BilledOut(Schema):
    """What the provider's imported usage records billed, at list price (`billing.engine`)."""

    usd: str
    kind: Literal["billed"]
    as_of: datetime
    unpriced: list[str] = Field(description="Why part of it is missing: usage records without a list price.")
    records: int
    first_day: date = Field(description="The earliest usage_date among the records summed.")
    last_day: date = Field(description="The latest usage_date among the records summed.")


class CostsOut(Schema):
    group_by: str
    from_: date = Field(..., alias="from")
    to: date
    total_usd: str
    kind: str
    as_of: datetime
    unpriced: list[str]
    rows: list[CostRowOut]
    billed: BilledOut | None = Field(
        None, description="Imported usage records dated in the range, beside the estimate; null when none is."
    )


class CostError(HttpError):
    """A 422 naming the query field that is wrong, in the API's usual error shape."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(422, f"1 invalid field(s); {message}")
        self.errors = [{"field": field, "message": message}]


def _row(row: dict) -> dict[str, str]:
    return {
        "key": str(row["key"]),
        **{name: reports.decimal_str(row[name]) for name in (*reports.AMOUNTS, "total_usd")},
    }


@router.get("/costs", auth=read_auth, response={200: CostsOut, **ERRORS}, by_alias=True)
def costs(request: HttpRequest, query: Query[CostQueryIn]) -> dict:
    """Estimated cost per group over an inclusive UTC date range, from the daily rollups."""
    end = query.to or timezone.now().date()
    if query.from_ is None and end.toordinal() < DEFAULT_DAYS:
        # 'to' in year 1 with no 'from': the default window would start before date.min (a 500).
        raise CostError("to", f"'to' ({end}) leaves no room for the default {DEFAULT_DAYS}-day window; give 'from'")
    start = query.from_ or end - timedelta(days=DEFAULT_DAYS - 1)
    if start > end:
        raise CostError("to", f"'to' ({end}) is before 'from' ({start})")
    if (end - start).days > 3660:
        raise CostError("from", "the range is longer than ten years")
    team_ids = list(Access(request).teams().values_list("pk", flat=True))
    filters = reports.CostFilters(start, end, accelerator_type=query.accelerator_type, region=query.region)
    group_by = GroupBy(query.group_by)
    now = timezone.now()
    # The rollups plus running runs' accrual since their last pass: what every page shows.
    extra = reports.accrual_for(spend.accrual(team_ids, now), team_ids, filters)
    out = [_row(row) for row in reports.grouped(reports.rows_for(team_ids, filters, group_by), group_by, extra)]
    rows = reports.rows_for(team_ids, filters)
    total = reports.totals(rows, extra)["total_usd"]
    figure = estimate(total, now, reports.unpriced_reasons(reports.cost_rows(team_ids, filters), extra))
    billed = engine.billed_between(team_ids, filters, now)
    return {
        "group_by": query.group_by, "from": start, "to": end, "total_usd": reports.decimal_str(total),
        "kind": figure.kind, "as_of": now, "unpriced": list(figure.unpriced), "rows": out,
        "billed": billed.as_json() if billed else None,
    }  # fmt: skip


# --- Egress records --------------------------------------------------------------------------

Region = Annotated[RegionName, Field(min_length=2)]


class EgressRecordIn(BaseModel):
    _no_nul = field_validator("*", mode="before")(refuse_nul)
    run: ExternalId
    run_source: RunSource | None = Field(
        default=None, description="Left out: the key's own source (`local` unless the key was granted another)."
    )
    source_region: Region
    destination_region: Region = Field(description="A region, or `internet`.")
    bytes: int = Field(ge=0, le=2**63 - 1)
    ts: Timestamp = Field(description="When the data moved (the end of the interval it covers).")


class EgressBatchIn(BaseModel):
    records: list[EgressRecordIn] = Field(min_length=1)


class EgressOut(Schema):
    inserted: int
    duplicates: int


class EgressConflictError(HttpError):
    """A 409 naming each record already stored with other bytes; nothing of the batch was stored."""

    def __init__(self, errors: list[dict[str, str]]) -> None:
        super().__init__(409, f"{len(errors)} record(s) conflict with stored ones; nothing was stored.")
        self.errors = errors


def _same_region(prefix: str, record: EgressRecordIn) -> list[dict[str, str]]:
    if record.source_region == record.destination_region:
        return [{"field": f"{prefix}.destination_region", "message": "is the source region"}]
    return []


@router.post("/egress", auth=bearer, response={200: EgressOut, 201: EgressOut, **ERRORS}, summary="Report egress")
def report_egress(request: HttpRequest, payload: EgressBatchIn) -> Status:
    """Bytes a run moved between regions (or to `internet`), priced by the region pair in force at `ts`.

    Idempotent: a record sent again (same run, regions and ts) is counted as a duplicate; the
    same key with other bytes is a 409. Reported records replace the estimate Airboard
    derives from network metrics for a cross-region run.
    """
    Access(request).require_write()
    records = payload.records
    runs, errors = batch_runs(request, records, "records", check=_same_region)
    if errors:
        raise InvalidRows(errors[:500])
    fair_ingest.charge_rows(request, len(records), "records")
    rows = [
        egress.EgressRow(runs[(r.run_source, r.run)].pk, r.source_region, r.destination_region, r.bytes, r.ts)
        for r in records
    ]
    try:
        result = egress.store_reported(rows)
    except egress.EgressConflict as exc:
        raise EgressConflictError(exc.rows[:500]) from None
    except egress.EgressImplausible as exc:
        raise InvalidRows(exc.rows[:500]) from None
    return Status(201 if result.inserted else 200, {"inserted": result.inserted, "duplicates": result.duplicates})
