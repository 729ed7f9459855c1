"""Cost facts and rollups: egress records, daily costs per group and team, rollup state."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.db import models

from billing.choices import (
    EgressOrigin,
)
from billing.fields import ExactDecimalField
from runs.models import Run


class EgressRecord(models.Model):
    """Bytes a run moved across regions at a time."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="egress_records")
    source_region = models.CharField(max_length=32)
    destination_region = models.CharField(max_length=32)
    bytes = models.BigIntegerField()
    ts = models.DateTimeField()
    origin = models.CharField(max_length=16, choices=EgressOrigin.choices, default=EgressOrigin.REPORTED)

    class Meta:
        constraints = [
            # A resent egress record is a no-op. Origin is part of the key: derived records are
            # replaced wholesale (billing.costs.egress) and must never collide with reported ones.
            models.UniqueConstraint(
                fields=["run", "source_region", "destination_region", "ts", "origin"],
                name="egressrecord_natural_key_origin",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}: {self.bytes} B {self.source_region}->{self.destination_region}"


# The summed columns of the rollups, in the order pages and CSV exports show them.
COST_AMOUNTS = ("compute_usd", "egress_usd", "idle_usd", "gpu_hours", "idle_gpu_hours")


class CostAmounts(models.Model):
    """The exact amounts a rollup row sums (abstract): money, GPU-hours and the runs counted."""

    compute_usd = ExactDecimalField(default=0)
    egress_usd = ExactDecimalField(default=0)
    idle_usd = ExactDecimalField(default=0, help_text="Part of compute_usd: GPUs held but idle.")
    gpu_hours = ExactDecimalField(default=0)
    idle_gpu_hours = ExactDecimalField(default=0)
    runs = models.PositiveIntegerField(default=0)
    unpriced = models.TextField(
        blank=True, help_text="What had no price, one reason a line: the amounts are then a lower bound."
    )

    class Meta:
        abstract = True


class CostDaily(CostAmounts):
    """Estimated spend of one UTC day for one combination of dimensions; rebuilt by rollups."""

    day = models.DateField()
    team = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="cost_days")
    creator = models.CharField(max_length=254, blank=True)
    usage_policy_name = models.CharField(max_length=200, blank=True)
    experiment_name = models.CharField(max_length=500, blank=True)
    accelerator_type = models.CharField(max_length=32, blank=True)
    region = models.CharField(max_length=32, blank=True)

    class Meta:
        constraints = [
            # recompute_days writes each dimension tuple once per day; two racing writers fail here.
            models.UniqueConstraint(
                fields=[
                    "day",
                    "team",
                    "creator",
                    "usage_policy_name",
                    "experiment_name",
                    "accelerator_type",
                    "region",
                ],
                name="costdaily_dimensions_unique",
            ),
        ]
        indexes = [
            # Cost pages and the API: a team's days in a date range (filtered by type or region).
            models.Index(fields=["team", "day"], name="costdaily_team_day_idx"),
            # recompute_days deletes whole days; staff pages read all teams by day range.
            models.Index(fields=["day"], name="costdaily_day_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.team_id} {self.experiment_name}: ${self.compute_usd + self.egress_usd}"


class CostDailyTeam(CostAmounts):
    """One UTC day of one team's spend: the CostDaily rows of that day and team, summed exactly.

    Written by `rollups.recompute_days` in the same transaction as CostDaily, so the two never
    disagree. Month to date and the by-team and by-day sums without dimension filters read
    this table: one row per team and day (about 20 x 31 a month) instead of one per
    experiment, user, policy, type and region (up to one per run and day).
    """

    day = models.DateField()
    team = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="cost_team_days")

    class Meta:
        constraints = [
            # One row per day and team; recompute_days replaces whole days, racing writers fail here.
            models.UniqueConstraint(fields=["day", "team"], name="costdailyteam_day_team_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.team_id}: ${self.compute_usd + self.egress_usd}"


class RunCostSpan(models.Model):
    """The UTC days a run's cost covered when it was last rolled up.

    A run whose attempts, cluster or egress records move keeps only its new days in the
    database; this remembers the old ones so the rollup rewrites them too (a retry whose
    start was corrected from Monday to Tuesday must leave Monday's total).
    """

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="cost_span")
    first_day = models.DateField()
    last_day = models.DateField()

    def __str__(self) -> str:
        return f"{self.run_id}: {self.first_day}..{self.last_day}"


class AccrualBaseline(models.Model):
    """A run accruing at the last rollup pass: its amounts on one UTC day as that pass stored them.

    The rollups hold a running run's cost as of the pass; what it has accrued since is its cost
    now less this (`billing.costs.spend.accrual`). Written by `rollups.refresh_changed` in the
    transaction that writes the rollups, all rows replaced each pass, so `as_of` is that pass's
    time. Read instead of pricing every running run a second time at the pass's time on each view,
    and exact where that was not: a late correction to a run's earlier hours (a backfilled
    attempt time, a region found later) changed the recomputed baseline but not the rollups.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="accrual_baseline", db_index=False)
    day = models.DateField()
    as_of = models.DateTimeField()
    compute_usd = ExactDecimalField(default=0)
    egress_usd = ExactDecimalField(default=0)
    idle_usd = ExactDecimalField(default=0)
    gpu_hours = ExactDecimalField(default=0)
    idle_gpu_hours = ExactDecimalField(default=0)

    class Meta:
        constraints = [
            # One row a run and day (its leading run column serves the run lookups too).
            models.UniqueConstraint(fields=["run", "day"], name="accrualbaseline_run_day_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} {self.day} as of {self.as_of.isoformat()}: ${self.compute_usd + self.egress_usd}"


class RollupState(models.Model):
    """Cursor and lease of a rollup: runs changed after `cursor` are rolled up next."""

    name = models.CharField(max_length=64)
    cursor = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True, help_text="Held by a worker until then.")
    last_run_at = models.DateTimeField(null=True, blank=True)
    days_last_run = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            # The claim (a conditional UPDATE) targets one row by name.
            models.UniqueConstraint(fields=["name"], name="rollupstate_name_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.name} at {self.cursor}"


class FailedRunCost(models.Model):
    """The cost engine's figure for a failed run's failed attempts, as of `priced_at`.

    Written by the cost rollup pass (billing.costs.failed.cache) for the failed runs it prices,
    and read by the failures overview instead of pricing up to 5,000 runs on every view. Used
    only while it is still the engine's answer (billing.costs.failed.failed_attempts_cost): the
    run not changed since, its attempts ended, the price book the same (`price_book`).
    """

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="failed_cost")
    compute = ExactDecimalField()
    priced_at = models.DateTimeField()
    price_book = models.CharField(max_length=64, help_text="billing.costs.failed.price_book() when priced.")

    def __str__(self) -> str:
        return f"{self.run_id}: ${self.compute} as of {self.priced_at.isoformat()}"


class RunCostFigure(models.Model):
    """The cost engine's estimate of a settled run (its total and kind), and whether it still holds.

    Written by the cost rollup pass (billing.costs.figures.cache) for the runs it prices, and read
    by the run list's CSV instead of pricing up to 100,000 runs a download. Valid by construction
    (billing.costs.figures): the database bumps `version` (triggers, migration billing 0018)
    whenever something the figure rests on is written: the run's row, an attempt, an egress
    record or a billed usage record of the run. The figure is the engine's answer only while
    `priced_version` (the version read before the run was priced) is still `version` and the
    price book is the one it was priced with. A row with no figure (`priced_version` null) is
    what a write leaves for a run never priced: its version, for a pass pricing it meanwhile.
    """

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="cost_figure")
    usd = ExactDecimalField(null=True)
    kind = models.CharField(max_length=32, blank=True)
    priced_at = models.DateTimeField(null=True)
    price_book = models.CharField(max_length=64, blank=True, help_text="billing.costs.failed.price_book() when priced.")
    version = models.BigIntegerField(
        default=0, help_text="Bumped by the database on every write the figure rests on (billing 0018's triggers)."
    )
    priced_version = models.BigIntegerField(
        null=True, help_text="The version read before the figure was priced; null: no figure."
    )

    def __str__(self) -> str:
        if self.priced_version is None or self.priced_at is None:
            return f"{self.run_id}: no figure (version {self.version})"
        return f"{self.run_id}: ${self.usd} ({self.kind}) as of {self.priced_at.isoformat()}"
