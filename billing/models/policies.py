"""Usage and budget policies, their versions, alert channels, alerts, deliveries, actions and admissions."""

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
    EnforcementKind,
    EnforcementOutcome,
    SpentAction,
)
from billing.fields import ExactDecimalField
from dashboard.kit.fields import EncryptedTextField
from dashboard.kit.outbound import redact_url
from runs.models import Run

# --- Usage and budget policies (billing/policies/budget.py, admission.py, alerts.py, ...) -----------


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
        "budget (USD)", max_digits=14, decimal_places=2, null=True, blank=True,
        help_text="Blank: no budget, constraints only.",
    )  # fmt: skip
    period = models.CharField("budget period", max_length=16, choices=BudgetPeriod.choices, default=BudgetPeriod.MONTH)
    period_start_day = models.PositiveSmallIntegerField(
        "period starts on day",
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(28)],
        help_text="Day of the month a period starts (1-28, so every month has it).",
    )
    alert_thresholds = models.JSONField("spend alerts (% of budget)", default=default_alert_thresholds, blank=True)
    forecast_thresholds = models.JSONField(
        "forecast alerts (% of budget)", default=default_forecast_thresholds, blank=True
    )
    action = models.CharField(
        "when the budget is spent", max_length=16, choices=SpentAction.choices, default=SpentAction.NOTIFY
    )
    allowed_accelerator_types = models.JSONField(
        "allowed accelerator types", default=list, blank=True, help_text="Empty: any type."
    )
    max_num_accelerators = models.PositiveIntegerField("most accelerators a run may use", null=True, blank=True)
    max_timeout_minutes = models.PositiveIntegerField("longest timeout a run may set (minutes)", null=True, blank=True)
    max_retries = models.PositiveIntegerField("most retries a run may set", null=True, blank=True)
    allowed_regions = models.JSONField("allowed regions", default=list, blank=True, help_text="Empty: any region.")
    allow_cross_region = models.BooleanField("allow GPUs from another region", default=True)
    idle_gpu_percent = models.FloatField(
        "GPUs count as idle below (% utilization)", null=True, blank=True, help_text="Blank: no idle-GPU rule."
    )
    idle_warn_minutes = models.PositiveIntegerField("warn after idle for (minutes)", null=True, blank=True)
    idle_cancel_minutes = models.PositiveIntegerField("cancel after idle for (minutes)", null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "usage policies"
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
    """One admission decision (billing.policies.admission.admit) for a workload naming an existing policy.

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
