"""Failure analyses and post-mortems of failed runs."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import models
from django.utils import timezone

from runs.choices import (
    PostMortemStatus,
)
from runs.models.record import Run


class FailureAnalysis(models.Model):
    """The classifier's verdict on a failed run: its first causal error, where, and what to do."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="failure")
    # Not stored: the run's newest post-mortem, set for display by runs.failures.views.
    postmortem: PostMortem | None
    # A class id of runs.failures.rules.CLASSES; not a choices field, so a new class in the
    # rules needs no migration.
    class_id = models.CharField(max_length=40)
    title = models.CharField(max_length=200)
    attempt_number = models.PositiveIntegerField(null=True, blank=True)
    node_index = models.PositiveIntegerField(null=True, blank=True)
    line = models.PositiveIntegerField(null=True, blank=True, help_text="1-based, within that node's log.")
    evidence = models.TextField(blank=True)
    # The evidence with numbers, hex ids and paths folded, so recurring causes group together.
    signature = models.CharField(max_length=200, blank=True)
    remedy = models.TextField(blank=True)
    note = models.TextField(blank=True, help_text="Timing remarks: timeout, runtime cap.")
    failed_at = models.DateTimeField(null=True, blank=True, help_text="When the failure happened, best known.")
    # 0..1: how much the verdict rests on (a cause named in the log, a symptom, an exit code,
    # telemetry), raised when the telemetry agrees and lowered when it contradicts the log.
    confidence = models.FloatField(null=True, blank=True)
    # Attempts before the one that ended the run: [{"attempt": 1, "class_id", "title", "evidence"}].
    earlier_attempts = models.JSONField(default=list, blank=True)
    # What the GPU telemetry showed before the end (runs.failures.classify_pass.TelemetrySignal.as_dict).
    telemetry = models.JSONField(default=dict, blank=True)
    classified_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # Similar failures and the failures overview: one class, newest first.
            models.Index(fields=["class_id", "-failed_at"], name="failure_class_failed_idx"),
            # Failures overview: a date range of failures across classes.
            models.Index(fields=["failed_at"], name="failure_failed_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}: {self.class_id}"


class PostMortem(models.Model):
    """A written post-mortem of a failed run: root cause, action items and a Markdown body."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="postmortems")
    title = models.CharField(max_length=200)
    summary = models.TextField(blank=True)
    owner = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="postmortems")
    status = models.CharField(max_length=16, choices=PostMortemStatus.choices, default=PostMortemStatus.DRAFT)
    root_cause = models.TextField(blank=True, help_text="Prefilled from the classifier.")
    # [{"text": "...", "owner": "alice", "done": false}]
    action_items = models.JSONField(default=list, blank=True)
    body = models.TextField(blank=True, help_text="Markdown; rendered sanitised.")
    created_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            # The run's failure page lists its post-mortems, newest first.
            models.Index(fields=["run", "-created_at"], name="postmortem_run_created_idx"),
        ]

    def __str__(self) -> str:
        return self.title
