"""`manage.py collect mlflow|runs|logs|prometheus --once`: run one collector pass by hand and print what it ingested."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.collectors import logsource, mlflow, prometheus, runsource

# Collector name -> module with `collect_once() -> CollectResult` (imported, not named by
# string, so the import graph the contracts read sees these edges).
COLLECTORS: dict[str, ModuleType] = {
    "mlflow": mlflow, "runs": runsource, "logs": logsource, "prometheus": prometheus,
}  # fmt: skip


class Command(BaseCommand):
    help = "Run one pass of a collector (the same code the Celery beat schedule runs) and print what it ingested."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", choices=sorted(COLLECTORS))
        parser.add_argument("--once", action="store_true", required=True, help="One pass, then exit.")

    def handle(self, *args: Any, **options: Any) -> None:
        module = COLLECTORS[options["name"]]
        try:
            result = module.collect_once()
        except module.CollectorError as exc:
            raise CommandError(f"{options['name']} collector failed: {exc}", returncode=1) from None
        for line in result.lines:
            self.stdout.write(line)
        self.stdout.write(f"{options['name']}: ingested {result.items} item(s)")
