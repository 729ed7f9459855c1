"""`manage.py import_usage FILE [--prices LIST_PRICES_CSV]`: import billed usage, all rows or none."""

from __future__ import annotations

from argparse import ArgumentParser
from contextlib import ExitStack
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from billing.reconcile import import_usage
from dashboard.progress import Progress


class Command(BaseCommand):
    help = (
        "Import billed usage exported from Databricks system.billing.usage (CSV), priced by "
        "system.billing.list_prices. Re-importing a file adds nothing; a bad row writes nothing."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("file", help="CSV export of system.billing.usage.")
        parser.add_argument("--prices", help="CSV export of system.billing.list_prices, imported first.")

    def handle(self, *args: Any, file: str, prices: str | None = None, **options: Any) -> None:
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
