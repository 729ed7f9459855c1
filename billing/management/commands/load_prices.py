"""`manage.py load_prices FILE` or `--default`: load a price CSV, all rows or none."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from billing.prices.pricebook import DEFAULT_PRICE_FILE, load_default_prices, load_price_csv
from dashboard.kit.progress import Progress

# A bar only for files long enough to take a while; the shipped book (tens of rows) loads at once.
PROGRESS_MIN_ROWS = 500


class Command(BaseCommand):
    help = (
        "Load accelerator-hour and egress prices from a CSV file, or the default price book "
        f"({DEFAULT_PRICE_FILE.name}). Reloading a file adds nothing; a bad row writes nothing."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("file", nargs="?", help="CSV file in the price book format.")
        parser.add_argument("--default", action="store_true", help="Load the price book shipped with Airboard.")
        parser.add_argument(
            "--replace",
            action="store_true",
            help="Overwrite stored prices that differ (default: refuse, since billed prices should not move).",
        )

    def handle(
        self, *args: Any, file: str | None = None, default: bool = False, replace: bool = False, **options: Any
    ) -> None:
        if bool(file) == default:
            raise CommandError("Give a FILE or --default, not both and not neither.")
        bars: list[Progress] = []

        def progress(done: int, total: int) -> None:
            if total < PROGRESS_MIN_ROWS:
                return
            if not bars:
                bars.append(Progress(total, "rows", label="comparing"))
            bars[0].update(done)

        try:
            if default:
                result = load_default_prices(replace=replace, progress=progress)
            else:
                assert file is not None  # a FILE when not --default (checked above)
                result = load_price_csv(file, replace=replace, progress=progress)
        except OSError as exc:
            raise CommandError(f"Cannot read {file}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise CommandError(f"Cannot read {file}: not UTF-8 text ({exc.reason})") from exc
        finally:
            for bar in bars:
                bar.close()

        if not result.ok:
            for error in result.errors:
                self.stderr.write(str(error))
            noun = "row" if len(result.errors) == 1 else "rows"
            raise CommandError(f"{len(result.errors)} bad {noun}; nothing was written.")
        self.stdout.write(
            self.style.SUCCESS(f"{result.added} added, {result.updated} updated, {result.unchanged} unchanged.")
        )
