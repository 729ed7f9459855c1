"""Recompute running runs' stall streaks (GpuStreak) from their last hour of raw samples."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from runs.choices import RunStatus
from runs.models import Run
from runs.telemetry import streaks


class Command(BaseCommand):
    help = (
        "Recompute the stall streaks the overview reads (GpuStreak) from the last hour of raw samples: "
        "once after upgrading, or after samples were written outside the ingest path. Running runs by default."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--run", type=int, action="append", dest="runs", help="A run id (repeatable).")

    def handle(self, *args: Any, **options: Any) -> None:
        ids = options["runs"] or list(Run.objects.filter(status=RunStatus.RUNNING).values_list("pk", flat=True))
        count = streaks.rebuild(ids, timezone.now())
        self.stdout.write(f"rebuilt the stall streaks of {count} GPUs in {len(ids)} runs")
