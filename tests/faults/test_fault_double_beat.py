"""A beat task delivered twice at once (two beats, or a redelivery racing the original).

Two real worker processes, each on its own queue, receive `billing.enforce_policies` and
then `billing.roll_up_costs` at the same moment. The data makes budget alerts due on several
policies, each with an email and a webhook channel (the webhook is a real HTTP server in this
process, so a double send would be seen). Afterwards: each (policy, period, threshold, kind)
has one BudgetAlert, fired once; each fired alert has exactly one Delivery per channel and the
webhook got exactly one POST per alert; CostDaily has no duplicate dimension rows and holds the
same rows and totals as one single pass.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.utils import timezone

from billing.choices import ChannelKind, DeliveryStatus
from billing.costs import rollups
from billing.models import AcceleratorPrice, AlertChannel, BudgetAlert, CostDaily, Delivery, UsagePolicy
from billing.policies import alerts, budget
from billing.prices.money import month_start
from billing.tasks import enforce_policies, roll_up_costs
from runs.models import Run
from tests.conftest import World, make_run, start_worker, stop_worker, wait_for

QUEUES = ("billing-double-beat-a", "billing-double-beat-b")
POLICIES = 3
COST_FIELDS = ("compute_usd", "egress_usd", "idle_usd", "gpu_hours", "idle_gpu_hours", "runs")
DIMENSIONS = ("day", "team_id", "creator", "usage_policy_name", "experiment_name", "accelerator_type", "region")


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[bytes]]]:
    received: list[bytes] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                received.append(body)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hooks/budget", received
    server.shutdown()
    server.server_close()


def _run_minutes(now: datetime) -> int:
    """Minutes each run lasts: up to 2 h, fitting two runs per policy into this month so far.

    The workers evaluate budgets at the real time, so the spend must fall in the current
    month; a multiple of 3 keeps 8 GPUs x $10 x minutes / 60 an exact figure.
    """
    room = int((now - month_start(now)).total_seconds() // 60) - POLICIES - 2
    minutes = min(120, room // 2)
    if minutes < 3:
        pytest.skip("needs a few minutes of the current month behind it (the workers read the real clock)")
    return minutes - minutes % 3


def _setup(world: World, hook_url: str, minutes: int) -> list[UsagePolicy]:
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        usd_per_hour=Decimal("10"),
    )  # fmt: skip
    begin = max(month_start(timezone.now()), timezone.now() - timedelta(hours=5))
    out = []
    for n in range(POLICIES):
        # A $1 budget against at least 2 x 3 min x 8 GPUs x $10 = $8: every spend threshold is crossed.
        policy = UsagePolicy.objects.create(name=f"policy-{n}", budget_usd=Decimal("1"))
        policy.teams.add(world.vision)
        AlertChannel.objects.create(policy=policy, kind=ChannelKind.EMAIL, target="ops@example.com")
        AlertChannel.objects.create(policy=policy, kind=ChannelKind.WEBHOOK, target=hook_url, secret="s3cret")
        for r in range(2):
            start = begin + timedelta(minutes=minutes * r + n)
            make_run(world.vision, f"p{n}-r{r}", usage_policy_name=policy.name, started_at=start,
                     ended_at=start + timedelta(minutes=minutes))  # fmt: skip
        out.append(policy)
    return out


def _cost_rows() -> list[tuple]:
    return sorted(CostDaily.objects.values_list(*DIMENSIONS, *COST_FIELDS))


def _succeeded(log: str, task: str) -> int:
    return sum(1 for line in log.splitlines() if f"Task {task}[" in line and " succeeded in " in line)


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_two_workers_running_the_billing_beats_at_once_fire_and_write_once(
    world: World, tmp_path: Path, webhook: tuple[str, list[bytes]]
) -> None:
    hook_url, received = webhook
    minutes = _run_minutes(timezone.now())
    policy_list = _setup(world, hook_url, minutes)
    # The days are rolled up once already (as the previous beat would have): both enforce
    # passes see the spend, whichever rollup commits first.
    rollups.recompute_days(rollups.touched_days(Run.objects.values_list("pk", flat=True), timezone.now()))
    env = {
        "AIRBOARD_EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
        "AIRBOARD_WEBHOOK_RETRIES": "0",
        "AIRBOARD_WEBHOOK_TIMEOUT_SECONDS": "5",
        # The receiver listens on 127.0.0.1, which the webhook guard refuses in production.
        "AIRBOARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
    }
    workers = [start_worker(tmp_path / queue, queues=queue, extra_env=env) for queue in QUEUES]
    try:
        # Both workers are idle: each takes its enforce pass at once, then its rollup pass.
        for task in (enforce_policies, roll_up_costs):
            for queue in QUEUES:
                task.apply_async(queue=queue)

        def drained() -> bool:
            logs = [w.log() for w in workers]
            return all(
                _succeeded(log, "billing.enforce_policies") == 1 and _succeeded(log, "billing.roll_up_costs") == 1
                for log in logs
            )

        assert wait_for(drained, timeout=120), "\n\n".join(w.log() for w in workers)
    finally:
        for worker in workers:
            stop_worker(worker)
    logs = "\n".join(w.log() for w in workers)
    assert "Traceback" not in logs, logs

    # Alerts: one row per natural key, each fired, each delivered once per channel.
    now = timezone.now()
    expected_alerts = 0
    for policy in policy_list:
        status = budget.evaluate(policy, now)
        crossed = sorted(alerts.crossed(status))
        assert crossed, "the data did not make any alert due; the test proved nothing"
        rows = BudgetAlert.objects.filter(policy=policy)
        keys = Counter(rows.values_list("period_start", "threshold", "kind"))
        assert all(count == 1 for count in keys.values()), keys
        assert sorted(rows.values_list("kind", "threshold")) == crossed
        assert not rows.filter(fired_at__isnull=True).exists()
        for alert in rows:
            per_channel = Counter(alert.deliveries.values_list("channel_id", flat=True))
            assert per_channel == Counter({c.pk: 1 for c in policy.channels.all()}), (alert, per_channel)
        expected_alerts += len(crossed)
    assert Delivery.objects.filter(alert__isnull=False).count() == expected_alerts * 2
    assert not Delivery.objects.exclude(status=DeliveryStatus.SENT).exists()
    assert len(received) == expected_alerts  # the webhook saw each alert once
    # Both passes ran; between them they fired each alert once.
    fired_by_pass = [
        int(n) for n in re.findall(r"enforce_policies\[[^]]+\] succeeded in [^:]+: .*'alerts': (\d+)", logs)
    ]
    assert len(fired_by_pass) == 2 and sum(fired_by_pass) == expected_alerts, fired_by_pass

    # CostDaily: no duplicate dimension tuples, and exactly what one single pass writes.
    raced = _cost_rows()
    assert raced, "no CostDaily rows"
    dims = Counter(row[: len(DIMENSIONS)] for row in raced)
    assert all(count == 1 for count in dims.values()), dims
    rollups.recompute_days(CostDaily.objects.values_list("day", flat=True).distinct())
    assert _cost_rows() == raced
    # Two runs per policy, each minutes / 60 h x 8 GPUs x $10.
    assert rollups.totals(CostDaily.objects.all())["compute_usd"] == Decimal(2 * 8 * 10 * minutes) / 60 * POLICIES
