"""Collectors: pull runs, logs and metrics from the systems a team already runs.

Each collector module exposes `collect_once() -> CollectResult`; a thin Celery task in
`runs/tasks.py` and `manage.py collect NAME --once` both call it, and `track()` records
its health in CollectorState for the collectors page.
"""
