"""`manage.py check_workload -f FILE`: validate a `databricks air run` workload file before submitting.

Exit status 0 when the file is valid, 1 when it is not (or cannot be read), so it can gate CI.
Problems go to stderr as `FILE:LINE: path: message`, the shape editors and CI annotators parse.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from runs.workload.schema import Problem, Workload, WorkloadError, parse_workload


class Command(BaseCommand):
    help = "Check a workload YAML file (the `databricks air run` file) and report every problem in it."

    # Pure file checking: no database, so it runs in CI without migrations.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("-f", "--file", required=True, help="path to the workload YAML file")
        # With a team, the workload also goes through admission (billing.policies.admission.admit): the
        # team's usage policy constraints and budget. That needs the database; without --team
        # the check stays pure file checking.
        parser.add_argument("--team", help="team the run would be charged to: also check admission for it")
        parser.add_argument("--region", help="workspace region for admission (default: the team's home region)")
        parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")

    def handle(self, *args: Any, **options: Any) -> None:
        filename: str = options["file"]
        as_json: bool = options["json"]
        team: str | None = options["team"]
        workload: Workload | None = None
        try:
            text = Path(filename).read_text(encoding="utf-8")
            workload = parse_workload(text)
            problems: list[Problem] = []
        except OSError as exc:
            problems = [Problem("", None, f"cannot read the file: {exc.strerror or exc}")]
        except UnicodeDecodeError:
            problems = [Problem("", None, "cannot read the file: it is not UTF-8 text")]
        except WorkloadError as exc:
            problems = exc.problems

        admission = None
        if team is not None and workload is not None:
            admission = _admission(workload, team, options.get("region"))
            if admission["decision"] == "deny":
                problems = [
                    Problem("", None, f"not admitted ({v['rule']}): {v['message']}") for v in admission["violations"]
                ]

        if as_json:
            report = _report(workload, problems, team)
            report["admission"] = admission
            self.stdout.write(json.dumps(report, indent=2))
        elif admission is not None and workload is not None:
            self.stdout.write(f"{admission['decision'].upper()}: {workload.experiment_name} for team {team}"
                              + (f" under policy {admission['policy']}" if admission["policy"] else ""))  # fmt: skip
            for problem in problems:
                self.stderr.write(_located(filename, problem))
            for warning in admission["warnings"]:
                self.stdout.write(f"note: {warning}")
        elif workload is not None:
            self.stdout.write(
                f"OK: {workload.experiment_name} on {workload.num_accelerators} x {workload.accelerator_type} "
                f"({workload.nodes} node(s))"
            )
        else:
            for problem in problems:
                self.stderr.write(_located(filename, problem))
        if problems:
            # Like `makemigrations --check`: a plain non-zero exit, no CommandError traceback or prefix.
            sys.exit(1)


def _located(filename: str, problem: Problem) -> str:
    """`FILE:LINE: path: message`, leaving out the parts a problem does not have."""
    where = f"{filename}:{problem.line}" if problem.line is not None else filename
    return ": ".join(part for part in (where, problem.path, problem.message) if part)


def _admission(workload: Workload, team_name: str, region: str | None) -> dict[str, Any]:
    """Admission's decision as a dict; an unknown team is a deny like any other violation."""
    from django.contrib.auth.models import Group

    from billing.engine import admit

    team = Group.objects.filter(name=team_name).first()
    if team is None:
        return {
            "decision": "deny",
            "policy": None,
            "warnings": [],
            "violations": [{"rule": "team", "message": f"No team is named {team_name!r}; check --team."}],
        }
    return admit(workload, team, region=region).as_dict()


def _report(workload: Workload | None, problems: list[Problem], team: str | None) -> dict[str, Any]:
    return {
        "ok": not problems,
        "team": team,
        "problems": [{"line": p.line, "path": p.path, "message": p.message} for p in problems],
        "workload": workload.summary() if workload is not None else None,
    }
