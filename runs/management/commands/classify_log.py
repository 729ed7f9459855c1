"""`manage.py classify_log FILE [--json]`: say why a training run failed, from its log.

Prints the failure class, the 1-based line of the evidence, the evidence line and the remedy;
with --json, one object with keys class, line, evidence, remedy. Exit status 0 when the log was
read (whatever it shows), 1 when it cannot be read, so scripts can tell "no log" from "no failure".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.failures.classify import classify_text


class Command(BaseCommand):
    help = "Classify a training log: the first causal failure, its line, and what to do about it."

    # Pure text in, text out: no database, so it runs anywhere, migrated or not.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="path to the log file")
        parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        parser.add_argument(
            "--exit-code", type=int, default=None, help="the run's exit code, used when the log itself is silent"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        try:
            # Logs carry binary junk (progress bars, truncated UTF-8 at chunk ends): replace it,
            # never crash on it.
            text = path.read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from exc
        verdict = classify_text(text, exit_code=options["exit_code"])
        if options["json"]:
            self.stdout.write(json.dumps(verdict.as_dict()))
            return
        line = "-" if verdict.line is None else str(verdict.line)
        self.stdout.write(f"class:    {verdict.class_id} ({verdict.title})")
        self.stdout.write(f"line:     {line}")
        self.stdout.write(f"evidence: {verdict.evidence}")
        self.stdout.write(f"remedy:   {verdict.remedy}")
