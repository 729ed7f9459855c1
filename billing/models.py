"""Price book and egress records: the facts the cost engine reads."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from billing.choices import (
    AlertKind,
    BudgetPeriod,
    ChannelKind,
    DeliveryStatus,
    EgressOrigin,
    EnforcementKind,
    EnforcementOutcome,
    PriceKind,
    RecordType,
    SpentAction,
)
from billing.fields import ExactDecimalField
from dashboard.fields import EncryptedTextField
from runs.choices import AcceleratorType
from runs.models import Run


class AcceleratorPrice(models.Model):
    """Price of one accelerator-hour of a type in a region, in force from `effective_from`."""

    accelerator_type = models.CharField(max_length=32, choices=AcceleratorType.choices)
    region = models.CharField(max_length=32)
    effective_from = models.DateTimeField()
    usd_per_hour = models.DecimalField(max_digits=12, decimal_places=6)
    source = models.CharField(max_length=500, blank=True, help_text="Where the figure comes from, with its date.")
    kind = models.CharField(
        max_length=16,
        choices=PriceKind.choices,
        default=PriceKind.LIST,
        help_text="A negotiated price, where one exists for the type and region, replaces the list price.",
    )

    class Meta:
        ordering = ["accelerator_type", "region", "effective_from"]
        constraints = [
            # One price per type, region, kind and start; the cost engine looks prices up by this.
            models.UniqueConstraint(
                fields=["accelerator_type", "region", "kind", "effective_from"],
                name="acceleratorprice_natural_key",
                violation_error_message="A price for this type and region already starts at that time.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.accelerator_type} {self.region} ${self.usd_per_hour}/h from {self.effective_from:%Y-%m-%d}"


class EgressPrice(models.Model):
    """Price per GB of data moved from one region to another (or to `internet`)."""

    source_region = models.CharField(max_length=32)
    destination_region = models.CharField(max_length=32)
    effective_from = models.DateTimeField()
    usd_per_gb = models.DecimalField(max_digits=12, decimal_places=6)
    usd_per_gb_processing = models.DecimalField(
        max_digits=12, decimal_places=6, default=0, help_text="Per-GB processing fee (a NAT gateway's, say)."
    )
    source = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["source_region", "destination_region", "effective_from"]
        constraints = [
            # One price per region pair and start; looked up by pair and time.
            models.UniqueConstraint(
                fields=["source_region", "destination_region", "effective_from"],
                name="egressprice_natural_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.source_region}->{self.destination_region} ${self.usd_per_gb}/GB"


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
            # replaced wholesale (billing.egress) and must never collide with reported ones.
            models.UniqueConstraint(
                fields=["run", "source_region", "destination_region", "ts", "origin"],
                name="egressrecord_natural_key_origin",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}: {self.bytes} B {self.source_region}->{self.destination_region}"


class InstancePrice(models.Model):
    """Price of one instance-hour of a classic cluster node type; blank region = any region."""

    instance_type = models.CharField(max_length=64)
    region = models.CharField(max_length=32, blank=True, help_text="Blank: the price holds in any region.")
    effective_from = models.DateTimeField()
    usd_per_hour = models.DecimalField(max_digits=12, decimal_places=6)
    source = models.CharField(max_length=500, blank=True, help_text="Where the figure comes from, with its date.")

    class Meta:
        ordering = ["instance_type", "region", "effective_from"]
        constraints = [
            # One price per type, region and start; classic cluster costs look prices up by this.
            models.UniqueConstraint(
                fields=["instance_type", "region", "effective_from"],
                name="instanceprice_natural_key",
                violation_error_message="A price for this instance type and region already starts at that time.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.instance_type} {self.region or 'any region'} ${self.usd_per_hour}/h"


class PriceChange(models.Model):
    """One field of one price changed (or created, old blank), by whom and when."""

    model = models.CharField(max_length=64, help_text="e.g. AcceleratorPrice.")
    object_id = models.PositiveBigIntegerField()
    field = models.CharField(max_length=64)
    old = models.TextField(blank=True)
    new = models.TextField(blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    at = models.DateTimeField()
    note = models.CharField(max_length=200, blank=True, help_text="e.g. 'CSV import prices.csv'.")

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [
            # The history page: newest changes first.
            models.Index(fields=["-at"], name="pricechange_at_idx"),
            # One price's history on its edit page.
            models.Index(fields=["model", "object_id"], name="pricechange_object_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.model}#{self.object_id}.{self.field}: {self.old!r} -> {self.new!r}"


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


# --- Usage and budget policies (billing/policies.py, alerts.py, enforcement.py) -----------


def default_alert_thresholds() -> list[int]:
    return [50, 80, 100]


def default_forecast_thresholds() -> list[int]:
    return [100]


class UsagePolicy(models.Model):
    """A budget and run constraints for the workloads naming it in `usage_policy_name`."""

    name = models.CharField(max_length=200, help_text="Exactly as workloads spell usage_policy_name.")
    databricks_policy_id = models.CharField(
        "Databricks policy id", max_length=64, blank=True,
        help_text="The workspace's usage policy id (a UUID): collected runs whose effective_usage_policy_id "
        "is this one link to this policy.",
    )  # fmt: skip
    description = models.TextField(blank=True)
    teams = models.ManyToManyField(Group, related_name="usage_policies", blank=True)
    budget_usd = models.DecimalField(
        max_digits=14, decimal_places=2, null=True, blank=True, help_text="Blank: no budget, constraints only."
    )
    period = models.CharField(max_length=16, choices=BudgetPeriod.choices, default=BudgetPeriod.MONTH)
    period_start_day = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(28)],
        help_text="Day of the month a period starts (1-28, so every month has it).",
    )
    alert_thresholds = models.JSONField(default=default_alert_thresholds, blank=True)
    forecast_thresholds = models.JSONField(default=default_forecast_thresholds, blank=True)
    action = models.CharField(max_length=16, choices=SpentAction.choices, default=SpentAction.NOTIFY)
    allowed_accelerator_types = models.JSONField(default=list, blank=True, help_text="Empty: any type.")
    max_num_accelerators = models.PositiveIntegerField(null=True, blank=True)
    max_timeout_minutes = models.PositiveIntegerField(null=True, blank=True)
    max_retries = models.PositiveIntegerField(null=True, blank=True)
    allowed_regions = models.JSONField(default=list, blank=True, help_text="Empty: any region.")
    allow_cross_region = models.BooleanField(default=True)
    idle_gpu_percent = models.FloatField(null=True, blank=True, help_text="Blank: no idle-GPU rule.")
    idle_warn_minutes = models.PositiveIntegerField(null=True, blank=True)
    idle_cancel_minutes = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        permissions = [("manage_policies", "Can create, edit and roll back usage policies")]
        constraints = [
            # Admission and the spend query find a policy by the workload's usage_policy_name.
            models.UniqueConstraint(
                fields=["name"], name="usagepolicy_name_unique", violation_error_message="A policy has this name."
            ),
            # The run source finds a policy by the run's effective_usage_policy_id.
            models.UniqueConstraint(
                fields=["databricks_policy_id"],
                condition=~models.Q(databricks_policy_id=""),
                name="usagepolicy_databricks_id_unique",
                violation_error_message="A policy has this Databricks id.",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class PolicyVersion(models.Model):
    """One saved state of a policy: who, when, a JSON snapshot and the diff from the previous one."""

    policy = models.ForeignKey(UsagePolicy, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    snapshot = models.JSONField()
    diff = models.JSONField(default=list, help_text="[{field, old, new}] against the previous version.")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    at = models.DateTimeField()
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["policy", "-number"]
        constraints = [
            # The history page lists a policy's versions by number; two saves racing fail here.
            models.UniqueConstraint(fields=["policy", "number"], name="policyversion_policy_number_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.policy_id} v{self.number}"


class AlertChannel(models.Model):
    """Where a policy's alerts go: email addresses, a Slack-compatible URL or a signed webhook."""

    policy = models.ForeignKey(UsagePolicy, on_delete=models.CASCADE, related_name="channels")
    kind = models.CharField(max_length=16, choices=ChannelKind.choices)
    # Encrypted at rest: a Slack-compatible URL carries its token in the path.
    target = EncryptedTextField(help_text="Comma-separated addresses, or the webhook URL.")
    # HMAC signing needs the secret itself, so it is encrypted rather than hashed; never shown
    # again after creation (forms and pages show `secret_prefix`), never logged.
    secret = EncryptedTextField(blank=True)
    secret_prefix = models.CharField(max_length=12, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.get_kind_display()} for {self.policy_id}"

    @property
    def display_target(self) -> str:
        """What pages show: addresses as they are, a webhook URL without what may be its token."""
        if self.kind == ChannelKind.EMAIL:
            return self.target
        from billing.alerts import redact_url

        return redact_url(self.target)


class BudgetAlert(models.Model):
    """A threshold crossed in one period; `fired_at` set by exactly one claimant."""

    policy = models.ForeignKey(UsagePolicy, on_delete=models.CASCADE, related_name="alerts")
    period_start = models.DateField()
    threshold = models.PositiveIntegerField(help_text="Percent of the budget.")
    kind = models.CharField(max_length=16, choices=AlertKind.choices)
    spend_usd = models.DecimalField(max_digits=14, decimal_places=2)
    forecast_usd = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    budget_usd = models.DecimalField(max_digits=14, decimal_places=2)
    created_at = models.DateTimeField()
    fired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            # The claim: insert-ignore on this key, then UPDATE ... WHERE fired_at IS NULL.
            models.UniqueConstraint(
                fields=["policy", "period_start", "threshold", "kind"], name="budgetalert_natural_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.policy_id} {self.period_start} {self.kind} {self.threshold}%"


class Delivery(models.Model):
    """One delivery of one alert or notice to one channel, after all its attempts."""

    policy = models.ForeignKey(UsagePolicy, on_delete=models.CASCADE, related_name="deliveries")
    alert = models.ForeignKey(BudgetAlert, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.ForeignKey(AlertChannel, null=True, blank=True, on_delete=models.SET_NULL)
    channel_kind = models.CharField(max_length=16, choices=ChannelKind.choices)
    target = models.CharField(max_length=1000, help_text="Webhook URL with any token redacted.")
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveSmallIntegerField(default=1)
    at = models.DateTimeField()

    class Meta:
        ordering = ["-at", "-pk"]
        verbose_name_plural = "deliveries"
        indexes = [
            # The policy page lists its latest deliveries.
            models.Index(fields=["policy", "-at"], name="delivery_policy_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.channel_kind} {self.status} {self.target}"


class PolicyAction(models.Model):
    """Something enforcement did to a run under a policy; at most one per run and kind."""

    policy = models.ForeignKey(UsagePolicy, on_delete=models.CASCADE, related_name="actions")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="policy_actions")
    kind = models.CharField(max_length=16, choices=EnforcementKind.choices)
    outcome = models.CharField(max_length=16, choices=EnforcementOutcome.choices, default=EnforcementOutcome.CLAIMED)
    method = models.CharField(max_length=32, blank=True, help_text="command, webhook or local flag.")
    output_tail = models.TextField(blank=True)
    at = models.DateTimeField()

    class Meta:
        ordering = ["-at", "-pk"]
        constraints = [
            # The claim: an insert of (run, kind) that conflicts means another worker acted already.
            models.UniqueConstraint(fields=["run", "kind"], name="policyaction_run_kind_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.run_id}: {self.outcome}"


class Admission(models.Model):
    """One admission decision (billing.policies.admit) for a workload naming an existing policy.

    Stored so a policy page can show what it let in and what it refused, and why: the API's
    admission check, `check_workload --team` and the launcher each decide through `admit`.
    """

    policy = models.ForeignKey(UsagePolicy, on_delete=models.CASCADE, related_name="admissions")
    team = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="admissions")
    at = models.DateTimeField()
    allowed = models.BooleanField()
    experiment_name = models.CharField(max_length=500, blank=True)
    accelerator_type = models.CharField(max_length=32, blank=True)
    num_accelerators = models.PositiveIntegerField(default=0)
    region = models.CharField(max_length=32, blank=True)
    estimated_usd_per_hour = ExactDecimalField(null=True, blank=True)
    violations = models.JSONField(default=list, blank=True, help_text="[{rule, message}], empty when allowed.")

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [
            # The policy page lists its latest decisions.
            models.Index(fields=["policy", "-at"], name="admission_policy_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.policy_id} {'allow' if self.allowed else 'deny'} {self.experiment_name} @ {self.at.isoformat()}"


# --- Reconciliation with the provider's bill (billing/reconcile.py) ------------------------


class BillingListPrice(models.Model):
    """A row of Databricks `system.billing.list_prices`: a SKU's default price per unit, in force."""

    sku_name = models.CharField(max_length=200)
    price_start_time = models.DateTimeField()
    price_end_time = models.DateTimeField(null=True, blank=True, help_text="Blank: still in force.")
    currency_code = models.CharField(max_length=8, default="USD")
    usage_unit = models.CharField(max_length=64, blank=True)
    price_per_unit = ExactDecimalField(help_text="pricing.default: the list price per usage unit.")

    class Meta:
        ordering = ["sku_name", "price_start_time"]
        constraints = [
            # A re-imported list price is a no-op; usage is priced by (sku, start) lookups.
            models.UniqueConstraint(
                fields=["sku_name", "currency_code", "price_start_time"],
                name="billinglistprice_natural_key",
                violation_error_message="A list price for this SKU already starts at that time.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.sku_name} {self.price_per_unit} {self.currency_code}/{self.usage_unit}"


class BilledUsage(models.Model):
    """One billed usage record (`system.billing.usage`), linked to a run by its job_run_id."""

    record_id = models.CharField(max_length=200, help_text="The provider's record_id, or a hash of the row.")
    sku_name = models.CharField(max_length=200)
    usage_start_time = models.DateTimeField()
    usage_end_time = models.DateTimeField()
    usage_date = models.DateField()
    usage_quantity = ExactDecimalField()
    usage_unit = models.CharField(max_length=64, blank=True)
    usage_metadata = models.JSONField(default=dict, blank=True)
    custom_tags = models.JSONField(default=dict, blank=True)
    job_run_id = models.CharField(max_length=200, blank=True)
    billing_origin_product = models.CharField(max_length=64, blank=True, help_text="AI_RUNTIME, JOBS, NETWORKING...")
    record_type = models.CharField(max_length=16, choices=RecordType.choices, default=RecordType.ORIGINAL)
    usage_type = models.CharField(max_length=64, blank=True, help_text="e.g. GPU_TIME, COMPUTE_TIME, NETWORK_BYTE.")
    product_features = models.JSONField(default=dict, blank=True)
    ai_runtime_workload_id = models.CharField(max_length=200, blank=True)
    ai_runtime_pool_id = models.CharField(max_length=200, blank=True, help_text="A reserved pool's usage.")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="billed_usage")
    price_per_unit = ExactDecimalField(null=True, blank=True, help_text="Blank: no list price in force.")
    billed_usd = ExactDecimalField(null=True, blank=True, help_text="usage_quantity x price_per_unit.")
    imported_at = models.DateTimeField()

    class Meta:
        ordering = ["usage_date", "record_id"]
        constraints = [
            # Idempotent import: a re-sent record is ignored (bulk insert with ignore_conflicts).
            models.UniqueConstraint(fields=["record_id"], name="billedusage_record_id_unique"),
        ]
        indexes = [
            # Reconciliation per day: billed usage in a date range.
            models.Index(fields=["usage_date"], name="billedusage_date_idx"),
            # Per-run billed figure (billed_for_run) and re-linking rows whose run arrived later.
            models.Index(fields=["job_run_id"], name="billedusage_job_run_idx"),
            # Splitting a reserved pool's rows over the runs that ran on it (reconcile.pool_shares).
            models.Index(fields=["ai_runtime_pool_id"], name="billedusage_pool_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.record_id}: {self.usage_quantity} {self.usage_unit} of {self.sku_name}"
