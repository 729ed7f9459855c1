"""Airboard's own figures in the Prometheus text exposition format (version 0.0.4).

`/metrics` (dashboard/metrics_views.py) serves `exposition()`. Every figure is read from the
tables the pages already use, with a handful of grouped queries, so a 15 s scrape costs a few
milliseconds and no new bookkeeping. The format is simple enough that writing it here is
clearer than a dependency: `# HELP` and `# TYPE` once per family, then one line per sample,
label values escaped as the format asks (backslash, double quote, newline).

Counters are `_total` and only ever grow: batches in a final state (done, failed) and rows
ingested. Everything that can go down (pending batches, runs by status, spend) is a gauge.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Avg, Count, Sum
from django.utils import timezone

from billing import engine
from billing.costs import reports, spend
from billing.models import CostDaily
from billing.prices.money import cents_that_add_up, month_start
from runs.choices import BatchStatus, RunStatus
from runs.models import CollectorState, GpuMinute, IngestBatch, Run

# GPU utilization by team averages the minute rollups of running runs over this window.
UTILIZATION_WINDOW = timedelta(minutes=5)


def escape_label(value: str) -> str:
    """A label value as the text format wants it: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """HELP text: backslash and newline escaped (double quotes are literal there)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float | int) -> str:
    """A sample value: integers without a decimal point, floats in repr, and the spelled specials."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


@dataclass
class Family:
    """One metric family: name, type, help, and its samples as (labels, value)."""

    name: str
    kind: str  # "gauge" or "counter"
    help: str
    samples: list[tuple[Mapping[str, str], float | int]] = field(default_factory=list)

    def add(self, value: float | int, **labels: str) -> None:
        self.samples.append((labels, value))

    def render(self) -> str:
        lines = [f"# HELP {self.name} {escape_help(self.help)}", f"# TYPE {self.name} {self.kind}"]
        for labels, value in self.samples:
            label_text = ",".join(f'{key}="{escape_label(str(val))}"' for key, val in labels.items())
            lines.append(f"{self.name}{{{label_text}}} {format_value(value)}" if label_text else
                         f"{self.name} {format_value(value)}")  # fmt: skip
        return "\n".join(lines) + "\n"


def spend_by_team_and_policy(now: datetime) -> Family:
    """Estimated spend of the current UTC month so far: the rollups plus accrual (`billing.costs.spend`)."""
    family = Family(
        "airboard_spend_month_to_date_usd", "gauge",
        "Estimated spend (compute + egress) of the current UTC month so far, by team and usage policy: "
        "the daily rollups plus what running runs accrued since their last pass.",
    )  # fmt: skip
    first = month_start(now).date()
    rows = CostDaily.objects.filter(day__gte=first, day__lte=now.date())
    extra = spend.accrual_between(spend.accrual(None, now), first, now.date())
    by_team: dict[str, list[dict]] = {}
    for row in sorted(reports.sum_by(rows, ["team__name", "usage_policy_name"], extra),
                      key=lambda r: (r["team__name"], r["usage_policy_name"])):  # fmt: skip
        by_team.setdefault(row["team__name"], []).append(row)
    for team, team_rows in by_team.items():
        # To the cent, so that `sum by (team)` is the team's total as the pages show it.
        for row, usd in zip(team_rows, cents_that_add_up([r["total_usd"] for r in team_rows]), strict=True):
            family.add(float(usd), team=team, policy=row["usage_policy_name"])
    return family


def billed_by_team_and_policy(now: datetime) -> Family:
    """Billed spend of the current UTC month so far (imported usage records, `billing.engine`),
    by team and usage policy; a team with no imported record has no series."""
    family = Family(
        "airboard_billed_month_to_date_usd", "gauge",
        "Billed spend of the current UTC month so far at list price, by team and usage policy: the provider's "
        "usage records imported (system.billing.usage), dated this month. Estimated spend is "
        "airboard_spend_month_to_date_usd; budgets are enforced on the estimate.",
    )  # fmt: skip
    billed = engine.billed_by_team_and_policy(month_start(now).date(), now.date(), now)
    by_team: dict[str, list[tuple[str, Decimal]]] = {}
    for (team, policy), figure in sorted(billed.items()):
        by_team.setdefault(team, []).append((policy, figure.usd))
    for team, rows in by_team.items():
        for (policy, _), usd in zip(rows, cents_that_add_up([usd for _, usd in rows]), strict=True):
            family.add(float(usd), team=team, policy=policy)
    return family


def gpu_utilization_by_team(now: datetime) -> Family:
    """Mean GPU utilization of running runs' GPUs over the last few minutes, by team."""
    family = Family(
        "airboard_gpu_utilization_percent", "gauge",
        f"Mean GPU utilization of running runs over the last {int(UTILIZATION_WINDOW.total_seconds() // 60)} "
        "minutes (minute rollups), by team.",
    )  # fmt: skip
    rows = (
        GpuMinute.objects.filter(minute__gte=now - UTILIZATION_WINDOW, run__status=RunStatus.RUNNING)
        .values("run__team__name")
        .annotate(avg=Avg("utilization_gpu_avg"))
        .order_by("run__team__name")
    )
    for row in rows:
        if row["avg"] is not None:
            family.add(float(row["avg"]), team=row["run__team__name"])
    return family


def collector_lag(now: datetime) -> list[Family]:
    """Seconds since each collector's last success, and its last success as a timestamp."""
    lag = Family("airboard_collector_lag_seconds", "gauge", "Seconds since the collector's last successful pass.")
    last = Family(
        "airboard_collector_last_success_timestamp_seconds", "gauge",
        "Unix time of the collector's last successful pass (absent: never succeeded).",
    )  # fmt: skip
    items = Family("airboard_collector_items_total", "counter", "Items the collector has ingested, all passes.")
    for state in CollectorState.objects.order_by("name"):
        labels = {"collector": state.name, "kind": state.kind}
        items.add(int(state.items_total), **labels)
        if state.last_success_at is not None:
            lag.add(max((now - state.last_success_at).total_seconds(), 0.0), **labels)
            last.add(state.last_success_at.timestamp(), **labels)
    return [lag, last, items]


def ingest() -> list[Family]:
    """Telemetry batches by kind and final status, rows ingested and duplicates, and the backlog."""
    finished = Family(
        "airboard_ingest_batches_total", "counter",
        "Telemetry batches processed, by kind and outcome (failed = rejected by the worker).",
    )  # fmt: skip
    rows = Family("airboard_ingest_rows_total", "counter", "Rows written by processed telemetry batches, by kind.")
    duplicates = Family(
        "airboard_ingest_duplicate_rows_total",
        "counter",
        "Rows of processed batches that were already stored, by kind.",
    )
    pending = Family("airboard_ingest_batches_pending", "gauge", "Telemetry batches received and not processed yet.")
    grouped = (
        IngestBatch.objects.values("kind", "status")
        .annotate(n=Count("pk"), inserted=Sum("inserted"), dups=Sum("duplicates"))
        .order_by("kind", "status")
    )
    by_kind: dict[str, dict[str, int]] = {}
    for row in grouped:
        kind, status = str(row["kind"]), str(row["status"])
        totals = by_kind.setdefault(kind, {"inserted": 0, "dups": 0})
        if status == BatchStatus.PENDING:
            pending.add(int(row["n"]), kind=kind)
            continue
        finished.add(int(row["n"]), kind=kind, status=status)
        totals["inserted"] += int(row["inserted"] or 0)
        totals["dups"] += int(row["dups"] or 0)
    for kind, totals in sorted(by_kind.items()):
        rows.add(totals["inserted"], kind=kind)
        duplicates.add(totals["dups"], kind=kind)
    return [finished, rows, duplicates, pending]


def runs_by_status() -> Family:
    """Runs in the database by team and status; every status appears, zero included."""
    family = Family("airboard_runs", "gauge", "Runs by team and status.")
    counts = {
        (row["team__name"], row["status"]): row["n"]
        for row in Run.objects.values("team__name", "status").annotate(n=Count("pk")).order_by()
    }
    for team in sorted({team for team, _ in counts}):
        for status in RunStatus.values:
            family.add(counts.get((team, status), 0), team=team, status=status)
    return family


def exposition(now: datetime | None = None) -> str:
    """The whole /metrics body."""
    now = now or timezone.now()
    families = [
        spend_by_team_and_policy(now),
        billed_by_team_and_policy(now),
        gpu_utilization_by_team(now),
        *collector_lag(now),
        *ingest(),
        runs_by_status(),
    ]
    return "".join(f.render() for f in families)
