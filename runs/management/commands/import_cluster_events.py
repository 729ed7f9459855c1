"""`manage.py import_cluster_events CLUSTER_ID FILE`: store a cluster's lifecycle events.

    databricks clusters events 0915-021615-dvxnyad4 -o json | manage.py import_cluster_events 0915-021615-dvxnyad4 -

The events decide the cluster's billable uptime and worker count (`runs.models.uptime`).
"""

from __future__ import annotations

import json
import sys
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from runs.collectors.cluster_events import parse_events, store_events
from runs.models import Cluster

MAX_BYTES = 64 * 1024 * 1024


class Command(BaseCommand):
    help = "Store the lifecycle events of a classic cluster from `databricks clusters events CLUSTER_ID -o json`."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("cluster_id", help="The workspace's cluster id, e.g. 0915-021615-dvxnyad4.")
        parser.add_argument("file", help="The JSON the CLI or the API printed; '-' reads standard input.")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster_id = str(options["cluster_id"])
        cluster = Cluster.objects.filter(cluster_id=cluster_id).first()
        if cluster is None:
            raise CommandError(f"no cluster {cluster_id!r}: the run source stores clusters from `clusters list` first")
        name = str(options["file"])
        text = sys.stdin.read(MAX_BYTES + 1) if name == "-" else _read(Path(name))
        if len(text) > MAX_BYTES:
            raise CommandError(f"{name}: larger than {MAX_BYTES // (1024 * 1024)} MiB")
        try:
            payload = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CommandError(f"{name}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from exc
        read = parse_events(payload, cluster_id)
        for problem in read.problems:
            self.stderr.write(f"{name}: {problem}")
        added = store_events(cluster, read.events)
        self.stdout.write(f"{cluster_id}: {added} new of {len(read.events)} events, {len(read.problems)} skipped.")


def _read(path: Path) -> str:
    try:
        with path.open(encoding="utf-8") as handle:
            return handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise CommandError(f"{path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise CommandError(f"{path}: not UTF-8 text") from exc
