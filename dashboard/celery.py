"""The Celery app. Workers: `celery -A dashboard worker -Q ingest,collect,billing`."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

app = Celery("airboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
