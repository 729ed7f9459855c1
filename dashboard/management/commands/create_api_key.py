"""`manage.py create_api_key --team T --role ingest|read [--source S]`: make a machine key, shown once."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser

from dashboard.models import ApiKey, ApiKeyRole
from runs.choices import RunSource


class Command(BaseCommand):
    help = "Create an API key bound to one team and one role. The key is printed once and stored hashed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True, help="Team (group) name the key belongs to.")
        parser.add_argument("--role", required=True, choices=ApiKeyRole.values, help="ingest: write and read; read.")
        parser.add_argument(
            "--source",
            default=RunSource.LOCAL,
            choices=RunSource.values,
            help="The run source the key writes runs under (default local). serverless or classic only for a "
            "team that pushes those runs itself instead of the run source collector.",
        )
        parser.add_argument("--name", default="", help="A label to tell keys apart, e.g. the host.")
        parser.add_argument("--create-team", action="store_true", help="Create the team if it does not exist.")

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["team"]
        team = Group.objects.filter(name=name).first()
        if team is None:
            if not options["create_team"]:
                known = ", ".join(Group.objects.order_by("name").values_list("name", flat=True)) or "none yet"
                raise CommandError(f"No team {name!r} (teams: {known}). Pass --create-team to create it.")
            team = Group.objects.create(name=name)
        key, raw = ApiKey.issue(team, options["role"], name=options["name"], source=options["source"])
        self.stderr.write(
            f"Created {options['role']} key {key.prefix}… for team {team.name!r}, source {key.source!r}. "
            "It is shown only once:"
        )
        self.stdout.write(raw)
