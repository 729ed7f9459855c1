"""Kinds used by billing/, as TextChoices (never bare strings)."""

from django.db import models


class PriceKind(models.TextChoices):
    """A list (public, on-demand) price, or a negotiated one that wins where both exist."""

    LIST = "list", "List"
    NEGOTIATED = "negotiated", "Negotiated"


class EgressOrigin(models.TextChoices):
    """Where an egress record comes from: posted by a source, or derived by Airboard."""

    REPORTED = "reported", "Reported"
    # From the run's MLflow network system metrics while its GPUs ran outside its home region.
    DERIVED = "derived", "Derived from network metrics"


class GroupBy(models.TextChoices):
    """Dimensions the cost pages and `GET /api/v1/costs` can group by."""

    TEAM = "team", "Team"
    ACCELERATOR_TYPE = "accelerator_type", "Accelerator type"
    REGION = "region", "Region"
    EXPERIMENT_NAME = "experiment_name", "Experiment"
    CREATOR = "creator", "Creator"
    USAGE_POLICY_NAME = "usage_policy_name", "Usage policy"
    DAY = "day", "Day"


class BudgetPeriod(models.TextChoices):
    """The span a policy's budget covers; it starts on the policy's `period_start_day`."""

    MONTH = "month", "Month"
    QUARTER = "quarter", "Quarter"


class SpentAction(models.TextChoices):
    """What happens once a policy's budget is spent."""

    NOTIFY = "notify", "Notify only"
    REFUSE = "refuse", "Refuse new runs"
    CANCEL = "cancel", "Refuse new runs and cancel running ones"


class AlertKind(models.TextChoices):
    """A threshold of actual spend, or of the forecast to the period's end."""

    SPEND = "spend", "Spend reached"
    FORECAST = "forecast", "Forecast to exceed"


class ChannelKind(models.TextChoices):
    """Where a policy's alerts go."""

    EMAIL = "email", "Email"
    SLACK = "slack", "Slack-compatible webhook"
    WEBHOOK = "webhook", "Signed JSON webhook"


class DeliveryStatus(models.TextChoices):
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"


class EnforcementKind(models.TextChoices):
    """What enforcement did to a run (each at most once per run)."""

    BUDGET_CANCEL = "budget_cancel", "Cancelled: budget spent"
    IDLE_WARN = "idle_warn", "Warned: GPUs idle"
    IDLE_CANCEL = "idle_cancel", "Cancelled: GPUs idle"


class EnforcementOutcome(models.TextChoices):
    CLAIMED = "claimed", "Claimed"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped (no cancel method configured)"


class RecordType(models.TextChoices):
    """`system.billing.usage.record_type`: a correction retracts a row and restates it."""

    ORIGINAL = "ORIGINAL", "Original"
    RETRACTION = "RETRACTION", "Retraction"
    RESTATEMENT = "RESTATEMENT", "Restatement"
