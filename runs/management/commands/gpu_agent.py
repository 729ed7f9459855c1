"""`manage.py gpu_agent`: run the GPU node agent with the project's Celery app and broker settings."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent.main import EXIT_OK, main


class Command(BaseCommand):
    help = "Sample this node's GPUs through NVML and ship them to the ingest queue (the node agent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--run-id")
        parser.add_argument("--run-source", default="serverless")
        parser.add_argument("--node", type=int, default=0)
        parser.add_argument("--attempt", type=int)
        parser.add_argument("--host")
        parser.add_argument("--interval", type=float)
        parser.add_argument("--ticks", type=int)
        parser.add_argument("--mapping")
        parser.add_argument("--buffer-dir")

    def handle(self, *args: Any, **options: Any) -> None:
        from dashboard.celery import app

        argv = ["--run-source", options["run_source"], "--node", str(options["node"])]
        for name in ("run_id", "attempt", "host", "interval", "ticks", "mapping", "buffer_dir"):
            if options[name] is not None:
                argv += [f"--{name.replace('_', '-')}", str(options[name])]
        code = main(argv, celery_app=app)
        if code != EXIT_OK:
            # main() already printed its one line; a traceback would add nothing.
            raise CommandError("the GPU agent stopped", returncode=code)
