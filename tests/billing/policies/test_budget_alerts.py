"""Budget alerts (billing/policies/alerts.py): thresholds fire once, forecasts, email and webhooks.

Webhooks go to a real HTTP server on 127.0.0.1 run by the test; nothing of ours is mocked.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import time_machine
from django.core import mail
from django.db import connection

from billing.choices import AlertKind, ChannelKind, DeliveryStatus
from billing.costs import rollups
from billing.models import AcceleratorPrice, AlertChannel, BudgetAlert, Delivery, UsagePolicy
from billing.policies import alerts, budget, enforcement
from tests.conftest import T0, make_run

# T0 is 2026-11-02 09:00 UTC; the policy's month starts on the 1st.
PERIOD_START = T0.date().replace(day=1)


@dataclass
class Hook:
    """A webhook receiver: answers `statuses` in turn (then 200) and keeps what it got."""

    statuses: list[int] = field(default_factory=list)
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def hook() -> Iterator[Hook]:
    state = Hook()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.received.append((dict(self.headers), body))
            self.send_response(state.statuses.pop(0) if state.statuses else 200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_port}/services/T000/B000/tok3n"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def _fast_webhooks(settings) -> None:
    # The receiver is this test's server on 127.0.0.1
    # (tests/dashboard/security/test_security_webhooks.py checks the guard).
    settings.AIRBOARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS = True
    settings.AIRBOARD_WEBHOOK_BACKOFF_SECONDS = 0
    settings.AIRBOARD_WEBHOOK_RETRIES = 2
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"


def make_policy(world, budget: str = "1000", **fields: object) -> UsagePolicy:
    AcceleratorPrice.objects.get_or_create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        defaults={"usd_per_hour": Decimal("10")},
    )  # fmt: skip
    policy = UsagePolicy.objects.create(name="vision-research", budget_usd=Decimal(budget), **fields)
    policy.teams.add(world.vision)
    return policy


def spend(world, hours: int, external_id: str = "r1") -> None:
    """A finished run under the policy costing hours x 8 GPUs x $10, rolled up."""
    make_run(world.vision, external_id, usage_policy_name="vision-research", ended_at=T0 + timedelta(hours=hours))
    rollups.recompute_days([T0.date()], now=T0 + timedelta(hours=hours))


def fired(policy: UsagePolicy) -> list[tuple[str, int]]:
    return sorted(policy.alerts.filter(fired_at__isnull=False).values_list("kind", "threshold"))


def test_thresholds_fire_once_each(world) -> None:
    policy = make_policy(world)
    AlertChannel.objects.create(policy=policy, kind=ChannelKind.EMAIL, target="ops@example.com, lead@example.com")
    spend(world, 7)  # $560: 50% crossed
    now = T0 + timedelta(hours=8)
    status = budget.evaluate(policy, now)
    assert status.spend == Decimal("560")
    assert [a.threshold for a in alerts.fire(status, now)] == [50]
    assert alerts.fire(budget.evaluate(policy, now), now) == []
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["ops@example.com", "lead@example.com"]
    assert "$560" in mail.outbox[0].body and "50%" in mail.outbox[0].body
    spend(world, 6, "r2")  # +$480 = $1,040: 80% and 100% crossed, 50% not again
    enforcement.enforce_all(now)
    enforcement.enforce_all(now)
    assert fired(policy) == [(AlertKind.SPEND, 50), (AlertKind.SPEND, 80), (AlertKind.SPEND, 100)]
    assert len(mail.outbox) == 3


def test_racing_claims_fire_once(world) -> None:
    """Two workers both evaluate, both insert, both UPDATE: exactly one wins each alert."""
    policy = make_policy(world)
    spend(world, 13)  # $1,040
    now = T0 + timedelta(hours=14)
    first, second = budget.evaluate(policy, now), budget.evaluate(policy, now)
    won_a = alerts.claim_alerts(first, now)
    won_b = alerts.claim_alerts(second, now)
    assert len(won_a) == 3 and won_b == []
    assert BudgetAlert.objects.count() == 3


@pytest.mark.django_db(transaction=True)
def test_two_threads_fire_once(world) -> None:
    policy = make_policy(world)
    AlertChannel.objects.create(policy=policy, kind=ChannelKind.EMAIL, target="ops@example.com")
    spend(world, 13)
    now = T0 + timedelta(hours=14)
    barrier = threading.Barrier(2)
    results: list[int] = []

    def worker() -> None:
        try:
            barrier.wait()
            results.append(enforcement.enforce_all(now).alerts)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results) == 3
    assert len(mail.outbox) == 3
    assert BudgetAlert.objects.filter(fired_at__isnull=False).count() == 3


def test_forecast_alert(world) -> None:
    policy = make_policy(world, forecast_thresholds=[100])
    AlertChannel.objects.create(policy=policy, kind=ChannelKind.EMAIL, target="ops@example.com")
    spend(world, 5)  # $400 by 2026-11-05 00:00: 4 of 30 days gone, forecast $3,000
    now = datetime(2026, 11, 5, tzinfo=UTC)
    status = budget.evaluate(policy, now)
    assert status.forecast == Decimal("3000.00")
    assert [(a.kind, a.threshold) for a in alerts.fire(status, now)] == [(AlertKind.FORECAST, 100)]
    assert "forecast to spend $3,000.00" in mail.outbox[0].body
    assert alerts.fire(budget.evaluate(policy, now), now) == []


def test_no_forecast_in_the_first_days(world) -> None:
    policy = make_policy(world)
    spend(world, 5)
    with time_machine.travel(datetime(2026, 11, 2, 12, tzinfo=UTC), tick=False):
        assert budget.evaluate(policy).forecast is None


def test_next_period_fires_again(world) -> None:
    policy = make_policy(world)
    spend(world, 7)
    alerts.fire(budget.evaluate(policy, T0 + timedelta(hours=8)), T0 + timedelta(hours=8))
    make_run(world.vision, "dec", usage_policy_name="vision-research", started_at=datetime(2026, 12, 1, 1, tzinfo=UTC),
             ended_at=datetime(2026, 12, 1, 8, tzinfo=UTC))  # fmt: skip
    rollups.recompute_days([datetime(2026, 12, 1).date()], now=datetime(2026, 12, 2, tzinfo=UTC))
    status = budget.evaluate(policy, datetime(2026, 12, 2, tzinfo=UTC))
    assert status.period_start.isoformat() == "2026-12-01"
    assert [a.threshold for a in alerts.fire(status, datetime(2026, 12, 2, tzinfo=UTC))] == [50]


def test_slack_shape(world, hook: Hook) -> None:
    policy = make_policy(world)
    AlertChannel.objects.create(policy=policy, kind=ChannelKind.SLACK, target=hook.url)
    spend(world, 7)
    alerts.fire(budget.evaluate(policy, T0 + timedelta(hours=8)), T0 + timedelta(hours=8))
    headers, body = hook.received[0]
    payload = json.loads(body)
    assert list(payload) == ["text"]
    assert "vision-research" in payload["text"]
    assert "X-Airboard-Signature" not in headers


def test_signed_webhook_is_verifiable(world, hook: Hook) -> None:
    policy = make_policy(world)
    AlertChannel.objects.create(policy=policy, kind=ChannelKind.WEBHOOK, target=hook.url, secret="s3cret-value")
    spend(world, 7)
    alerts.fire(budget.evaluate(policy, T0 + timedelta(hours=8)), T0 + timedelta(hours=8))
    headers, body = hook.received[0]
    expected = "sha256=" + hmac.new(b"s3cret-value", body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["X-Airboard-Signature"], expected)
    payload = json.loads(body)
    assert payload["policy"] == "vision-research" and payload["threshold"] == 50 and payload["spend_usd"] == "560"


def test_retries_on_500_and_logs_the_delivery(world, hook: Hook, caplog) -> None:
    hook.statuses = [500, 503]
    policy = make_policy(world)
    AlertChannel.objects.create(policy=policy, kind=ChannelKind.WEBHOOK, target=hook.url, secret="s3cret-value")
    spend(world, 7)
    alerts.fire(budget.evaluate(policy, T0 + timedelta(hours=8)), T0 + timedelta(hours=8))
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.status_code, delivery.attempts) == (DeliveryStatus.SENT, 200, 3)
    assert len(hook.received) == 3
    assert "tok3n" not in delivery.target and delivery.target.endswith("/services/***")
    assert "s3cret" not in caplog.text


def test_gives_up_after_bounded_retries(world, hook: Hook, caplog) -> None:
    hook.statuses = [500] * 10
    policy = make_policy(world)
    AlertChannel.objects.create(policy=policy, kind=ChannelKind.SLACK, target=hook.url)
    spend(world, 7)
    alerts.fire(budget.evaluate(policy, T0 + timedelta(hours=8)), T0 + timedelta(hours=8))
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.status_code, delivery.attempts) == (DeliveryStatus.FAILED, 500, 3)
    assert "HTTP 500" in delivery.error
    assert "tok3n" not in caplog.text


def test_no_retry_on_4xx(world, hook: Hook) -> None:
    hook.statuses = [404]
    policy = make_policy(world)
    AlertChannel.objects.create(policy=policy, kind=ChannelKind.SLACK, target=hook.url)
    spend(world, 7)
    alerts.fire(budget.evaluate(policy, T0 + timedelta(hours=8)), T0 + timedelta(hours=8))
    assert Delivery.objects.get().attempts == 1


def test_redact_url() -> None:
    assert alerts.redact_url("https://hooks.slack.com/services/T1/B2/xyz") == "https://hooks.slack.com/services/***"
    assert alerts.redact_url("https://u:p@example.com/hook?token=abc") == "https://example.com/hook?***"
