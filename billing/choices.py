"""Kinds used by billing/, as TextChoices (never bare strings)."""

from django.db import models


class PriceKind(models.TextChoices):
    """A list (public, on-demand) price, or a negotiated one that wins where both exist."""

    LIST = "list", "List"
    NEGOTIATED = "negotiated", "Negotiated"


class GroupBy(models.TextChoices):
    """Dimensions the cost pages and `GET /api/v1/costs` can group by."""

    TEAM = "team", "Team"
    ACCELERATOR_TYPE = "accelerator_type", "Accelerator type"
    REGION = "region", "Region"
    EXPERIMENT_NAME = "experiment_name", "Experiment"
    CREATOR = "creator", "Creator"
    USAGE_POLICY_NAME = "usage_policy_name", "Usage policy"
    DAY = "day", "Day"
