"""Backfill failure classifications: `manage.py classify_runs [--all]`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from dashboard.kit.progress import Progress
from runs.failures.classify_pass import FAILED_STATUSES, classify_run
from runs.models import Run


class Command(BaseCommand):
    help = "Classify failed and timed-out runs that have no stored classification (--all: every one again)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--all", action="store_true", help="Re-classify runs that already have a verdict.")

    def handle(self, *args: Any, **options: Any) -> None:
        runs = Run.objects.filter(status__in=FAILED_STATUSES).order_by("pk")
        if not options["all"]:
            runs = runs.filter(failure__isnull=True)
        counts: dict[str, int] = {}
        with Progress(runs.count(), "runs", label="classifying") as progress:
            for run in runs.iterator(chunk_size=200):
                class_id = classify_run(run).class_id
                counts[class_id] = counts.get(class_id, 0) + 1
                progress.advance()
        summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "nothing to do"
        self.stdout.write(f"Classified {sum(counts.values())} run(s): {summary}")
