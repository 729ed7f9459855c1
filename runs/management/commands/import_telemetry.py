"""`manage.py import_telemetry FILE --run RUN_ID`: import GPU telemetry a team already recorded.

Reads nvidia-smi `--query-gpu` CSV, `nvidia-smi dmon`, `dcgmi dmon` or dcgm-exporter text (see
runs/telemetry/importers/), stores the samples on one node of the run and builds the minute rollups.
Idempotent: importing the same file again stores nothing new.

Timestamps: nvidia-smi and dmon write local time without a zone; they are read as UTC unless
`--tz` names the zone they were written in. Files without timestamps (dcgmi dmon, untimed DCGM
scrapes, dmon without `-o DT`) need `--start`: a time is never guessed from the file's mtime.
Samples outside the run's window (see runs.telemetry.importers.checks.keep_window) are not imported and counted.

Exit status 1, with the reason, for an unknown run, a file with nothing usable (every sample
outside the run's window included), or a file whose values are all zero (a broken exporter).
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dashboard.kit.progress import Progress
from runs.choices import RunSource, TelemetrySource
from runs.ingest import node_for
from runs.models import GpuSample, Run
from runs.telemetry.importers.checks import keep_window, run_window
from runs.telemetry.importers.common import DCGM_FORMATS, ParsedSample, ParseResult, TelemetryFormat
from runs.telemetry.importers.parse import parse_telemetry
from runs.telemetry.store import store_gpu_samples

# Samples per store_gpu_samples call: bounds one transaction and its rollup refresh.
STORE_CHUNK = 5000
# Problems printed; the count of the rest follows.
SHOWN_PROBLEMS = 20


class Command(BaseCommand):
    help = "Import GPU telemetry (nvidia-smi CSV, nvidia-smi dmon, DCGM exporter text) into a run."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the telemetry file")
        parser.add_argument("--run", required=True, dest="run_id", help="the run's external id")
        parser.add_argument(
            "--source-run-type",
            choices=RunSource.values,
            default=RunSource.SERVERLESS,
            help="where the run comes from (external ids are unique per source)",
        )
        parser.add_argument("--team", help="the run's team, when several teams have a run with this id")
        parser.add_argument("--node", type=int, default=0, help="node index the file was recorded on (default 0)")
        parser.add_argument("--attempt", type=int, help="attempt number (default: the latest)")
        parser.add_argument(
            "--format",
            choices=[f.value for f in TelemetryFormat],
            default=TelemetryFormat.AUTO,
            help="file format (default: detected from the content)",
        )
        parser.add_argument("--fields", help="comma-separated --query-gpu list, for --format=csv,noheader files")
        parser.add_argument("--start", help="ISO time of the first sample, for files without timestamps")
        parser.add_argument("--tz", help="zone the tool's local timestamps were written in (default UTC)")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        tz = _zone(options["tz"])
        start = _start(options["start"], tz)
        fields = [f.strip() for f in options["fields"].split(",") if f.strip()] if options["fields"] else None
        if options["node"] < 0 or (options["attempt"] is not None and options["attempt"] < 1):
            raise CommandError("--node counts from 0 and --attempt from 1", returncode=1)
        # External ids are unique per team (SECURITY.md, "Ownership"): two teams may each have one.
        found = Run.objects.filter(source=options["source_run_type"], external_id=options["run_id"])
        if options["team"]:
            found = found.filter(team__name=options["team"])
        runs = list(found.select_related("team")[:2])
        if not runs:
            raise CommandError(
                f"no {options['source_run_type']} run with external id {options['run_id']!r}", returncode=1
            )
        if len(runs) > 1:
            raise CommandError(
                f"several teams have a {options['source_run_type']} run {options['run_id']!r}; name one with --team",
                returncode=1,
            )
        run = runs[0]
        try:
            text = path.read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror or exc}", returncode=1) from None

        result = parse_telemetry(text, fmt=options["format"], start=start, fields=fields, tz=tz)
        if result.suspect:
            raise CommandError(f"not imported from {path}: {result.suspect}", returncode=1)
        keep_window(result, *run_window(run), f"run {run.external_id}'s window")
        if not result.samples:
            reasons = "; ".join(str(p) for p in result.problems[:5]) or "no samples in it"
            raise CommandError(f"nothing to import from {path}: {reasons}", returncode=1)

        node = node_for(run, options["attempt"], options["node"])
        source = TelemetrySource.DCGM if result.format in DCGM_FORMATS else TelemetrySource.NVIDIA_SMI
        inserted = duplicates = 0
        with Progress(len(result.samples), "samples", label="storing") as bar:
            for offset in range(0, len(result.samples), STORE_CHUNK):
                chunk = [_to_model(s, run, node.pk, source) for s in result.samples[offset : offset + STORE_CHUNK]]
                stored = store_gpu_samples(chunk)
                inserted += stored.inserted
                duplicates += stored.duplicates
                bar.advance(len(chunk))
        self._report(result, inserted, duplicates, run, node.attempt.number, node.index)

    def _report(
        self, result: ParseResult, inserted: int, duplicates: int, run: Run, attempt: int, node_index: int
    ) -> None:
        skipped = result.problem_count
        first, last = result.first_ts, result.last_ts
        assert first is not None and last is not None  # there are samples
        self.stdout.write(
            f"imported {len(result.samples)} samples for GPUs {result.gpu_indexes} "
            f"from {first.isoformat()} to {last.isoformat()}; skipped {skipped} lines" + (":" if skipped else "")
        )
        for problem in result.problems[:SHOWN_PROBLEMS]:
            self.stdout.write(f"  {problem}")
        if skipped > SHOWN_PROBLEMS:
            self.stdout.write(f"  ... and {skipped - SHOWN_PROBLEMS} more")
        self.stdout.write(
            f"{inserted} new, {duplicates} already stored "
            f"({result.format} into run {run.external_id}, attempt {attempt}, node {node_index})"
        )


def _to_model(sample: ParsedSample, run: Run, node_id: int, source: str) -> GpuSample:
    return GpuSample(
        run=run, node_id=node_id, gpu_index=sample.gpu_index, ts=sample.ts, source=source, **sample.values()
    )


def _zone(name: str | None) -> tzinfo | None:
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise CommandError(
            f"unknown time zone {name!r} (use an IANA name such as Europe/Paris)", returncode=1
        ) from None


def _start(value: str | None, tz: tzinfo | None) -> datetime | None:
    """--start as aware UTC; a time without a zone is read in --tz (UTC by default)."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(f"--start {value!r} is not an ISO time (e.g. 2024-01-15T10:23:45)", returncode=1) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=tz or UTC)
    return parsed.astimezone(UTC)
