"""`manage.py refresh_costs`: one rollup pass now, so no cost page opens empty.

`make run` (runall) calls it at every start and `seed_demo` after it writes the demo, before
beat's first five-minute pass; a worker holding the lease makes it a no-op, said so.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from billing.costs.rollups import refresh_changed


class Command(BaseCommand):
    help = "Roll up the daily costs of every run changed since the last pass (what beat does every five minutes)."

    def handle(self, *args: Any, **options: Any) -> None:
        result = refresh_changed()
        if not result.claimed:
            self.stdout.write("Cost rollup: another worker holds the lease; it will write the rows.")
            return
        self.stdout.write(f"Cost rollup: {result.runs} runs, {result.days} days, {result.rows} rows written.")
