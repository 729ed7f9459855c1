"""`manage.py import_usage FILE [--prices LIST_PRICES_CSV]` or `import_usage --from-command`.

Imports billed usage, all rows or none: from CSV files, or from the configured query
(AIRBOARD_BILLING_USAGE_COMMAND, billing/reconcile/usage_source.py).
"""

from __future__ import annotations

from argparse import ArgumentParser
from contextlib import ExitStack
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from billing.reconcile import usage_source
from billing.reconcile.importing import ImportResult, import_usage
from dashboard.kit.progress import Progress


class Command(BaseCommand):
    help = (
        "Import billed usage exported from Databricks system.billing.usage (CSV), priced by "
        "system.billing.list_prices. Re-importing a file adds nothing; a bad row writes nothing."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("file", nargs="?", help="CSV export of system.billing.usage.")
        parser.add_argument("--prices", help="CSV export of system.billing.list_prices, imported first.")
        parser.add_argument(
            "--from-command",
            action="store_true",
            help="Run AIRBOARD_BILLING_USAGE_COMMAND (and AIRBOARD_BILLING_PRICES_COMMAND) instead of reading files.",
        )

    def handle(
        self, *args: Any, file: str | None, prices: str | None = None, from_command: bool = False, **options: Any
    ) -> None:
        if from_command == bool(file):
            raise CommandError("Give a usage CSV file, or --from-command; not both, not neither.")
        if from_command:
            try:
                result = usage_source.import_configured()
            except usage_source.UsageSourceError as exc:
                raise CommandError(str(exc)) from exc
            return self._report(result)
        assert file is not None  # a FILE when not --from-command (checked above)
        try:
            with ExitStack() as stack:
                usage = stack.enter_context(open(file, encoding="utf-8-sig", newline=""))
                price_file = stack.enter_context(open(prices, encoding="utf-8-sig", newline="")) if prices else None
                with Progress(0, "records", label="importing usage") as bar:

                    def advance(done: int, total: int) -> None:
                        bar.total = total
                        bar.update(done)

                    result = import_usage(usage, price_file, progress=advance)
        except OSError as exc:
            raise CommandError(f"Cannot read {exc.filename}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise CommandError(f"Cannot read the file: not UTF-8 text ({exc.reason})") from exc
        self._report(result)

    def _report(self, result: ImportResult) -> None:
        if not result.ok:
            for error in result.errors:
                self.stderr.write(str(error))
            noun = "row" if len(result.errors) == 1 else "rows"
            raise CommandError(f"{len(result.errors)} bad {noun}; nothing was written.")
        self.stdout.write(
            self.style.SUCCESS(
                f"{result.added} added, {result.unchanged} unchanged, {result.prices_added} list prices added; "
                f"{result.linked} linked to runs, {result.priced} priced, {result.unpriced} without a list price."
            )
        )
