"""`manage.py launch -f FILE --team T`: admit a workload and run its command here as a real run.

The work is in `runs.launch.launcher`; this command reads the arguments, runs the admission check and
turns the outcome into an exit status: 0 when the run succeeded, 1 when it was refused, failed,
timed out or was cancelled. Refusals go to stderr as `FILE:LINE: path: message`.
"""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import Any, NoReturn

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandParser
from django.urls import reverse

from runs.choices import RunSource, RunStatus
from runs.ingest import non_finite_paths
from runs.launch.launcher import Launcher, admit, launch_problems, located
from runs.models import Run
from runs.workload.schema import Problem, WorkloadError, parse_workload


class Command(BaseCommand):
    help = "Check a workload YAML file, then run its command on this machine as a recorded run."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("-f", "--file", required=True, help="path to the workload YAML file")
        parser.add_argument("--team", required=True, help="name of the team the run belongs to")
        parser.add_argument("--user", help="dashboard username recorded as the run's creator (default: your login)")
        parser.add_argument("--external-id", help="the run's id (default: local-<12 hex digits>)")
        parser.add_argument(
            "--timeout-seconds", type=float, help="per-attempt time limit, overriding the file's timeout_minutes"
        )
        parser.add_argument("--follow", action="store_true", help="also print the command's output here")

    def handle(self, *args: Any, **options: Any) -> None:
        filename: str = options["file"]
        try:
            text = Path(filename).read_text(encoding="utf-8")
            workload = parse_workload(text)
        except OSError as exc:
            self._refuse([located(filename, Problem("", None, f"cannot read the file: {exc.strerror or exc}"))])
        except UnicodeDecodeError:
            self._refuse([located(filename, Problem("", None, "cannot read the file: it is not UTF-8 text"))])
        except WorkloadError as exc:
            self._refuse([located(filename, problem) for problem in exc.problems])

        reasons = [located(filename, problem) for problem in launch_problems(workload)]
        team = Group.objects.filter(name=options["team"]).first()
        if team is None:
            reasons.append(f"no team named {options['team']!r}")
        user = None
        if options["user"]:
            user = User.objects.filter(username=options["user"]).first()
            if user is None:
                reasons.append(f"no user named {options['user']!r}")
        external_id = options["external_id"]
        if external_id and Run.objects.filter(team=team, source=RunSource.LOCAL, external_id=external_id).exists():
            reasons.append(f"a local run with external id {external_id!r} already exists")
        # JSON columns cannot hold NaN or infinities (a YAML `.nan` parameter): refuse before the run exists.
        reasons += [
            f"{filename}: {path}: must be a finite number" for path in non_finite_paths(workload.run_fields(), "")
        ]
        if team is not None and not reasons:
            reasons += [f"not admitted: {reason}" for reason in admit(workload, team)]
        if reasons:
            self._refuse(reasons)
        assert team is not None  # a missing team is one of the reasons refused above

        launcher = Launcher(
            workload,
            workload_text=text,
            workdir=Path(filename).resolve().parent,
            team=team,
            # The creator as the run source records one (an email), so a person's launched runs and
            # their workspace runs are one creator in every table, not "alice" beside her address.
            creator=(user.email or user.username) if user else getpass.getuser(),
            external_id=external_id,
            timeout_seconds=options["timeout_seconds"],
            tracking_uri=settings.AIRBOARD_MLFLOW_TRACKING_URI,
            say=self._say,
            echo=self._echo if options["follow"] else None,
        )
        self._say(f"launching {launcher.external_id} for team {team.name}: {workload.experiment_name}")
        run = launcher.launch()
        self._say(f"run page: {reverse('run_detail', args=[run.pk])}")
        if run.status != RunStatus.SUCCEEDED:
            sys.exit(1)

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def _echo(self, text: str) -> None:
        self.stdout.write(text, ending="")
        self.stdout.flush()

    def _refuse(self, reasons: list[str]) -> NoReturn:
        for reason in reasons:
            self.stderr.write(reason)
        # Like check_workload: a plain non-zero exit, no CommandError traceback or prefix.
        sys.exit(1)
