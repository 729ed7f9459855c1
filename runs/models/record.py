"""The run record: a run, its attempts and nodes, their logs and events."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, Group, User
from django.db import models
from django.db.models import Q
from django.utils import timezone

from dashboard.kit import access
from runs.choices import (
    AcceleratorType,
    RunEventKind,
    RunOrigin,
    RunSource,
    RunStatus,
)

# Serverless GPU runtime caps (docs/costs.md, "The money rule"): a run stops at its cap whatever its timeout.
NOTEBOOK_RUNTIME_CAP = timedelta(days=7)
CLI_RUNTIME_CAP = timedelta(days=14)
# The longest any run may hold GPUs: what a pushed run's window is checked against.
MAX_RUNTIME = CLI_RUNTIME_CAP


class RunQuerySet(models.QuerySet):
    def for_user(self, user: User | AnonymousUser) -> RunQuerySet:
        """Runs the user may see: their teams' runs, or everything for staff."""
        return access.scope(self, user)

    def active(self) -> RunQuerySet:
        return self.filter(status__in=RunStatus.active())


class Run(models.Model):
    """One training run as its source knows it, with the workload it was submitted as."""

    # Not stored: set for templates by runs.glance.attach (a runs.glance.Glance and a
    # runs.telemetry.underuse.Underuse or None; not imported here, where models import nothing above them).
    glance: Any
    underuse: Any

    source = models.CharField(max_length=16, choices=RunSource.choices, default=RunSource.SERVERLESS)
    external_id = models.CharField(max_length=200, help_text="The source's own run id.")
    team = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="runs")
    origin = models.CharField(
        max_length=16,
        choices=RunOrigin.choices,
        default=RunOrigin.COLLECTOR,
        help_text="Who wrote the run first; nobody else may change it.",
    )
    user = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    creator = models.CharField(max_length=254, blank=True, help_text="Who submitted it, as the source names them.")
    experiment_name = models.CharField(max_length=500, blank=True)
    mlflow_run_id = models.CharField(max_length=64, blank=True)
    mlflow_url = models.URLField(max_length=1000, blank=True)
    run_page_url = models.URLField(max_length=1000, blank=True)
    accelerator_type = models.CharField(max_length=32, choices=AcceleratorType.choices, blank=True)
    instance_type = models.CharField(max_length=64, blank=True, help_text="Classic clusters: GPU worker type.")
    num_accelerators = models.PositiveIntegerField(default=1)
    gpus_per_node = models.PositiveIntegerField(default=1)
    region = models.CharField(max_length=32, blank=True, help_text="Region where the GPUs ran.")
    home_region = models.CharField(max_length=32, blank=True, help_text="The workspace's own region.")
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    state_message = models.TextField(blank=True)
    submitted_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    timeout_minutes = models.PositiveIntegerField(null=True, blank=True)
    max_retries = models.PositiveIntegerField(default=0)
    usage_policy_name = models.CharField(max_length=200, blank=True)
    parameters = models.JSONField(default=dict, blank=True)
    workload_yaml = models.TextField(blank=True, help_text="As submitted; secrets only as scope/key references.")
    is_demo = models.BooleanField(default=False, help_text="Made by seed_demo.")
    cluster = models.ForeignKey(
        "Cluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs", help_text="Classic runs."
    )
    cancel_requested_at = models.DateTimeField(null=True, blank=True, help_text="Set by the dashboard; launchers stop.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        constraints = [
            # Upserts by a key or an operator look a run up within the writer's team: another
            # team's run with the same id is invisible to them (no existence oracle), so ids
            # are unique per team, not globally.
            models.UniqueConstraint(
                fields=["team", "source", "external_id"],
                name="run_team_source_external_id_unique",
                violation_error_message="Your team already has a run with this source and external id.",
            ),
            # The run source collector looks its runs up by (source, external id) alone: a
            # Databricks run id names one run, the one the collector wrote first.
            models.UniqueConstraint(
                fields=["source", "external_id"],
                condition=Q(origin=RunOrigin.COLLECTOR),
                name="run_collector_source_external_id_unique",
                violation_error_message="The run source already has a run with this source and external id.",
            ),
        ]
        indexes = [
            # Run list: a team's runs, newest first.
            models.Index(fields=["team", "-submitted_at"], name="run_team_submitted_idx"),
            # Run list default ordering, newest first with the id breaking ties (`sort_runs`), and
            # the date-range filter across teams (staff). With the id in the key, the run list's
            # CSV reads 100,000 runs in its order from this index and sorts nothing
            # (`runs_csv`): the sort of the formatted rows and their gather from parallel workers
            # cost more than the formatting they shared out.
            models.Index(fields=["-submitted_at", "-id"], name="run_submitted_id_idx"),
            # Overview: runs active now, failures in the last 7 days.
            models.Index(fields=["status", "submitted_at"], name="run_status_submitted_idx"),
            # A team's runs by status (the run list's status filter and its count, read from the
            # index alone) and by when they ended (failures in the last 7 days): at 100,000 runs
            # those counts read 33,000 rows from the table (31-35 ms) where this reads 3-12 ms.
            models.Index(fields=["team", "status", "ended_at"], name="run_team_status_ended_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.external_id} ({self.experiment_name or 'no experiment'})"

    @property
    def is_active(self) -> bool:
        return self.status in RunStatus.active()

    @property
    def is_notebook_run(self) -> bool:
        """A serverless notebook run: no workload file, and its parameters name a notebook.

        A run with a workload YAML was submitted by `databricks air run`, and a run with neither
        (the Jobs record of an AI Runtime task) is a CLI run too: only a notebook marker says
        notebook, so an unknown run gets the longer cap and is never called over it too early.
        """
        return not self.workload_yaml and "notebook" in json.dumps(self.parameters or {}).lower()

    @property
    def runtime_cap(self) -> timedelta:
        """How long serverless GPU compute lets this run go: 7 days for notebook runs, 14 for CLI runs."""
        return NOTEBOOK_RUNTIME_CAP if self.is_notebook_run else CLI_RUNTIME_CAP

    @property
    def runtime_kind(self) -> str:
        """ "notebook" or "CLI": the kind of run the runtime cap is for, as pages name it."""
        return "notebook" if self.is_notebook_run else "CLI"

    @property
    def is_cross_region(self) -> bool:
        return bool(self.region and self.home_region and self.region != self.home_region)

    @property
    def duration(self) -> timedelta | None:
        return self.duration_between(self.started_at, self.ended_at, timezone.now())

    @staticmethod
    def duration_between(started: datetime | None, ended: datetime | None, now: datetime) -> timedelta | None:
        """A run's duration from its times: None before it starts, up to `now` while it runs, never negative."""
        if not started:
            return None
        return max((ended or now) - started, timedelta(0))

    @staticmethod
    def duration_seconds_sql(now: datetime) -> models.Func:
        """`duration_between` in whole seconds as SQL (PostgreSQL), a running run's end being `now`.

        For the run list's CSV written by COPY; tests/dashboard/kit/test_csv_copy.py pins it to
        `int(duration.total_seconds())` at the same `now`.
        """
        return _DurationSeconds(models.F("ended_at"), models.Value(now), models.F("started_at"))

    def mlflow_link(self) -> str:
        """The MLflow UI link: the recorded one, else one built from AIRBOARD_MLFLOW_UI_URL."""
        if self.mlflow_url:
            return self.mlflow_url
        template = settings.AIRBOARD_MLFLOW_UI_URL
        if template and self.mlflow_run_id:
            return template.replace("{run_id}", self.mlflow_run_id)
        return ""


class _DurationSeconds(models.Func):
    """FLOOR(seconds of GREATEST(COALESCE(end, now) - start, 0)): NULL when the run has not started."""

    output_field = models.BigIntegerField()

    # The stubs type the params as a tuple; Django's own Func.as_sql returns a list, as this does.
    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:  # type: ignore[override]
        (ended, ended_params), (now, now_params), (started, started_params) = (
            compiler.compile(expression) for expression in self.source_expressions
        )
        # GREATEST skips NULLs, so a run not started is asked for first: its duration is NULL.
        # date_part is a double, as `total_seconds()` is (EXTRACT's numeric cost 10 ms more a 100,000 rows).
        sql = (
            f"CASE WHEN {started} IS NULL THEN NULL ELSE"
            f" FLOOR(date_part('epoch', GREATEST(COALESCE({ended}, {now}) - {started}, interval '0')))::bigint END"
        )
        return sql, [*started_params, *ended_params, *now_params, *started_params]


class Attempt(models.Model):
    """One try of a run; each retry is a new attempt with its own MLflow run."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField(help_text="1 for the first try.")
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    state_message = models.TextField(blank=True)
    mlflow_run_id = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["run", "number"]
        constraints = [
            # Upserts of a run's attempts key on the attempt number.
            models.UniqueConstraint(fields=["run", "number"], name="attempt_run_number_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.run.external_id} attempt {self.number}"

    def billed_seconds(self, now: datetime | None = None) -> float:
        """Seconds this attempt held its GPUs: start to end, or to now while running."""
        if not self.started_at:
            return 0.0
        end = self.ended_at or now or timezone.now()
        return max((end - self.started_at).total_seconds(), 0.0)


class Node(models.Model):
    """One machine within an attempt."""

    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="nodes")
    index = models.PositiveIntegerField(help_text="0 for the first (driver) node.")
    host = models.CharField(max_length=255, blank=True)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)

    class Meta:
        ordering = ["attempt", "index"]
        constraints = [
            models.UniqueConstraint(fields=["attempt", "index"], name="node_attempt_index_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.attempt} node {self.index}"


class LogChunk(models.Model):
    """An ordered piece of one node's log; a resend of the same (node, seq) is a no-op."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="log_chunks")
    seq = models.PositiveIntegerField(help_text="Order of the chunk within the node's log, from 0.")
    text = models.TextField()
    line_count = models.PositiveIntegerField(default=0)
    received_at = models.DateTimeField(auto_now_add=True)
    # Whether runs.failures.logphrases has noted the advice phrases this chunk holds (in LogPhrase).
    phrases_noted = models.BooleanField(default=False)

    class Meta:
        ordering = ["node", "seq"]
        constraints = [
            # Idempotent appends: the natural key of a chunk.
            models.UniqueConstraint(fields=["node", "seq"], name="logchunk_node_seq_unique"),
        ]
        indexes = [
            # runs.failures.logphrases.catch_up: the chunks a writer stored without noting (bulk loads); none, normally.
            models.Index(fields=["id"], name="logchunk_unnoted_idx", condition=Q(phrases_noted=False)),
        ]

    def __str__(self) -> str:
        return f"{self.node} chunk {self.seq}"


class LogPhrase(models.Model):
    """A kind of advice evidence (runs.failures.logphrases.LOG_PHRASES) seen in some log chunk of a run."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="log_phrases", db_index=False)
    kind = models.CharField(max_length=32)

    class Meta:
        constraints = [
            # Noted once however many chunks hold it; led by run: advice reads its window's runs.
            models.UniqueConstraint(fields=["run", "kind"], name="logphrase_natural_key"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}: {self.kind}"


class RunEvent(models.Model):
    """Something that happened to a run: a GPU lost, an Xid, a cancel, a timeout."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="events")
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    ts = models.DateTimeField()
    kind = models.CharField(max_length=32, choices=RunEventKind.choices)
    message = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["run", "ts"]
        constraints = [
            # A resent event (agent retry, launcher restart) is stored once.
            models.UniqueConstraint(fields=["run", "kind", "ts", "gpu_index"], name="runevent_natural_key"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} {self.kind} at {self.ts.isoformat()}"
