"""`manage.py advise`: configuration advice for classic clusters and recent runs."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from runs.clusters.advice import advise
from runs.models import Cluster, Run


class Command(BaseCommand):
    help = (
        "List configuration findings (Photon on GPU, custom images on the ML runtime, access modes, "
        "deprecated APIs, low utilization, runs near their cap...) for clusters and the last 30 days of runs."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print a JSON list of findings.")
        parser.add_argument("--team", help="Only this team's clusters and runs (team name).")

    def handle(self, *args: Any, **options: Any) -> None:
        runs, clusters = Run.objects.all(), Cluster.objects.all()
        if team_name := options.get("team"):
            team = Group.objects.filter(name=team_name).first()
            if team is None:
                raise CommandError(f"no team named {team_name!r}")
            runs, clusters = runs.filter(team=team), clusters.filter(team=team)
        findings = advise(runs, clusters)
        if options["json"]:
            self.stdout.write(json.dumps([f.as_json() for f in findings], indent=2))
            return
        if not findings:
            self.stdout.write("No findings.")
            return
        for f in findings:
            self.stdout.write(f"[{f.rule}] {f.subject_type} {f.subject} ({f.team})")
            self.stdout.write(f"    why: {f.why}")
            self.stdout.write(f"    fix: {f.fix}")
        self.stdout.write(f"{len(findings)} finding{'s' if len(findings) != 1 else ''}.")
