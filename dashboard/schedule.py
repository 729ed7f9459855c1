"""Celery beat's schedule: every periodic job, in one place, each with why it runs.

A collector whose source is not configured returns at once, so every entry can stay.
"""

from typing import TypedDict

from celery.schedules import crontab


class BeatEntry(TypedDict):
    task: str
    schedule: crontab


BEAT_SCHEDULE: dict[str, BeatEntry] = {
    # Telemetry batches are recorded before they are queued; this re-queues any the broker
    # lost (Redis restarted, worker queue purged) so accepted data always lands.
    "requeue-pending-batches": {
        "task": "runs.requeue_pending_batches",
        "schedule": crontab(minute="*"),
    },
    # New and updated MLflow runs and the metric points since each cursor.
    "collect-mlflow": {
        "task": "runs.collect_mlflow",
        "schedule": crontab(minute="*"),
    },
    # The live demo: in a demo workspace only (dashboard.demo.live.is_live), a minute of the demo
    # fleet through the ingest path; a no-op returning at once everywhere else.
    "collect-live-demo": {
        "task": "runs.collect_live_demo",
        "schedule": crontab(minute="*"),
    },
    # Run records (and classic clusters) from the configured run source.
    "collect-runs": {
        "task": "runs.collect_runs",
        "schedule": crontab(minute="*"),
    },
    # New log lines of active runs from the configured log source.
    "collect-logs": {
        "task": "runs.collect_logs",
        "schedule": crontab(minute="*"),
    },
    # dcgm-exporter series of active and recently ended runs' nodes from the Prometheus-compatible
    # server at AIRBOARD_PROMETHEUS_URL (runs/collectors/prometheus.py); incremental by cursor.
    "collect-prometheus": {
        "task": "runs.collect_prometheus",
        "schedule": crontab(minute="*"),
    },
    # Daily cost rollups (CostDaily) for the days touched by runs changed since the last
    # pass, and running runs (they accrue to now); the cost pages and API read these rows.
    "roll-up-costs": {
        "task": "billing.roll_up_costs",
        "schedule": crontab(minute="*/5"),
    },
    # Usage policies against spend: budget alerts (each fires once), cancels of runs under a
    # spent policy, the idle-GPU rule. Every 5 minutes, offset by 2 from the cost rollup so it
    # reads fresh rows; running runs' accrual since the rollup is added by the pass itself.
    "enforce-policies": {
        "task": "billing.enforce_policies",
        "schedule": crontab(minute="2-59/5"),
    },
    # Billed usage from the configured query (AIRBOARD_BILLING_USAGE_COMMAND) for
    # reconciliation. system.billing tables fill in hours after the usage, so daily is enough.
    "import-billed-usage": {
        "task": "billing.import_billed_usage",
        "schedule": crontab(hour="4", minute="53"),
    },
    # PostgreSQL: the raw samples' daily partitions, AIRBOARD_TELEMETRY_PARTITION_DAYS_AHEAD days
    # ahead (a no-op on SQLite, and when they exist). Hourly, so a missed run or a failed lock
    # costs an hour, never a day's samples in the DEFAULT partition; at :41, clear of the rest.
    "maintain-telemetry-partitions": {
        "task": "runs.maintain_telemetry_partitions",
        "schedule": crontab(minute="41"),
    },
    # Raw samples of closed minutes folded into one compressed block per node-minute
    # (runs/telemetry/blocks.py); each pass folds at most 30 minutes, so a backlog drains over passes.
    "compact-telemetry": {
        "task": "runs.compact_telemetry",
        "schedule": crontab(minute="*"),
    },
    # Raw GPU samples past AIRBOARD_TELEMETRY_RAW_DAYS go, in batches; the minute and hour
    # rollups stay. At 03:17 UTC, away from the top of the hour when collectors and billing run.
    "prune-telemetry": {
        "task": "runs.prune_telemetry",
        "schedule": crontab(hour="3", minute="17"),
    },
}
