from typing import Any

from django.apps import AppConfig
from django.db import connections
from django.db.models.signals import post_migrate


def _cost_figure_triggers(using: str = "default", **kwargs: Any) -> None:
    """After every `migrate` (and a test database's creation): the stored cost figures' triggers
    are in place, made again where a migration rebuilt a watched table (billing.costs.figure_triggers)."""
    from billing.costs import figure_triggers

    figure_triggers.install(connections[using])


class BillingConfig(AppConfig):
    name = "billing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        post_migrate.connect(_cost_figure_triggers, sender=self, dispatch_uid="billing.cost_figure_triggers")
