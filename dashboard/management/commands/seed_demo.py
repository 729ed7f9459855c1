"""`manage.py seed_demo`: a deterministic demo workspace (teams, users, ~2,000 runs and their data)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from dashboard.demo.policies import seed_policies
from dashboard.demo.write import seed_demo


class Command(BaseCommand):
    help = (
        "Create the demo workspace: 3 teams, 11 users (password in dashboard/demo/constants.py) and runs over the "
        "last 90 days with logs, metrics, GPU telemetry and egress. The same --seed gives the same data."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--seed", type=int, default=42, help="Random seed (default 42).")
        parser.add_argument("--runs", type=int, default=2000, help="How many runs (default 2000).")
        parser.add_argument("--reset", action="store_true", help="Delete the existing demo data first.")
        parser.add_argument(
            "--if-empty", action="store_true", help="Do nothing when any run exists (used by `make run`)."
        )
        parser.add_argument(
            "--without-advice-examples",
            action="store_true",
            help="Only the planned runs: no extra clusters and runs that trigger each configuration-advice rule.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        runs = int(options["runs"])
        if runs < 0:
            raise CommandError("--runs must be 0 or more")
        counts = seed_demo(
            seed=int(options["seed"]),
            runs=runs,
            reset=bool(options["reset"]),
            if_empty=bool(options["if_empty"]),
            advice_examples=not options["without_advice_examples"],
            log=self.stdout.write,
        )
        if counts is not None:
            # The first look is never an empty cost page: roll the demo's costs up now.
            call_command("refresh_costs", stdout=self.stdout)
            # The policies the demo's runs name, set from those costs so their alerts fire.
            made = seed_policies()
            self.stdout.write(f"Demo usage policies: {', '.join(p.name for p in made) or 'already there'}.")
