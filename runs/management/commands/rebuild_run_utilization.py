"""Recompute runs' utilization summaries (RunUtilization) from their stored minute rollups."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from runs.telemetry import utilization


class Command(BaseCommand):
    help = (
        "Recompute the per-run utilization summaries advice reads from the runs' GpuMinute rows "
        "(after minutes were written or deleted outside the rollup path). All runs with minutes by default."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--run", type=int, action="append", dest="runs", help="A run id (repeatable).")

    def handle(self, *args: Any, **options: Any) -> None:
        count = utilization.rebuild(options["runs"])
        self.stdout.write(f"rebuilt the utilization summaries of {count} runs")
