"""`manage.py gpu_agent`: run the GPU node agent (it posts to the site at AIRBOARD_URL, or --url)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent.main import EXIT_OK, main


class Command(BaseCommand):
    help = "Sample this node's GPUs through NVML and post them to the site's HTTP API (the node agent)."

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
        parser.add_argument("--url")

    def handle(self, *args: Any, **options: Any) -> None:
        argv = ["--run-source", options["run_source"], "--node", str(options["node"])]
        for name in ("run_id", "attempt", "host", "interval", "ticks", "mapping", "buffer_dir", "url"):
            if options[name] is not None:
                argv += [f"--{name.replace('_', '-')}", str(options[name])]
        code = main(argv)
        if code != EXIT_OK:
            # main() already printed its one line; a traceback would add nothing.
            raise CommandError("the GPU agent stopped", returncode=code)
