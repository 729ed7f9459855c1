"""Machine credentials: API keys bound to one team and one role, stored hashed."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth.models import Group
from django.db import models
from django.utils import timezone

from runs.choices import RunSource


class ApiKeyRole(models.TextChoices):
    INGEST = "ingest", "Ingest (write runs, logs, telemetry; read)"
    READ = "read", "Read only"


KEY_PREFIX = "ab_"


def hash_key(raw: str) -> str:
    """Keys carry 256 random bits, so a plain SHA-256 is enough and checks in microseconds."""
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiKey(models.Model):
    """A machine's key: shown once at creation, kept as a hash plus a visible prefix."""

    team = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="api_keys")
    role = models.CharField(max_length=16, choices=ApiKeyRole.choices)
    source = models.CharField(
        max_length=16,
        choices=RunSource.choices,
        default=RunSource.LOCAL,
        help_text="The run source this key writes runs under; collector sources only when granted.",
    )
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, help_text="First characters, to tell keys apart.")
    key_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # Every request looks its key up by hash.
            models.UniqueConstraint(fields=["key_hash"], name="apikey_hash_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.team.name}, {self.role})"

    @classmethod
    def issue(cls, team: Group, role: str, name: str = "", source: str = RunSource.LOCAL) -> tuple[ApiKey, str]:
        """Create a key; returns the row and the raw key, which is never stored."""
        raw = KEY_PREFIX + secrets.token_urlsafe(32)
        key = cls.objects.create(
            team=team, role=role, name=name, source=source, prefix=raw[:10], key_hash=hash_key(raw)
        )
        return key, raw

    @classmethod
    def authenticate(cls, raw: str) -> ApiKey | None:
        key = cls.objects.select_related("team").filter(key_hash=hash_key(raw), revoked_at__isnull=True).first()
        if key is not None:
            # At most one write a minute per key, not one per request: the row just read says
            # whether it is due, and the conditional update keeps concurrent requests to one.
            now = timezone.now()
            stale = now - timedelta(minutes=1)
            if key.last_used_at is None or key.last_used_at < stale:
                cls.objects.filter(pk=key.pk).filter(
                    models.Q(last_used_at__isnull=True) | models.Q(last_used_at__lt=stale)
                ).update(last_used_at=now)
        return key

    @property
    def can_write(self) -> bool:
        return self.role == ApiKeyRole.INGEST


class TaskState(models.Model):
    """One Celery task's last pass and its totals, written by the worker (dashboard/taskstate.py)."""

    task = models.CharField(max_length=100, help_text="The task's name, e.g. 'runs.collect_mlflow'.")
    last_started_at = models.DateTimeField(null=True, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)
    last_state = models.CharField(max_length=16, blank=True, help_text="Celery's state: SUCCESS, FAILURE, RETRY.")
    last_result = models.CharField(max_length=300, blank=True, help_text="What the pass brought in, in words.")
    last_duration_ms = models.PositiveIntegerField(default=0)
    runs_total = models.BigIntegerField(default=0)
    failures_total = models.BigIntegerField(default=0)
    # Staff only (the collectors page): an exception's text may name hosts or paths; redacted first.
    last_error = models.CharField(max_length=500, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["task"]
        constraints = [
            # The worker's update-or-create finds a task's row by its name.
            models.UniqueConstraint(fields=["task"], name="taskstate_task_unique"),
        ]

    def __str__(self) -> str:
        return self.task
