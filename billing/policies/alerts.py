"""Budget alerts: which thresholds a policy crossed, claimed once, delivered to its channels.

Exactly once: each (policy, period_start, threshold, kind) is a `BudgetAlert` row inserted
with conflicts ignored, then claimed by `UPDATE ... WHERE fired_at IS NULL`; only the worker
whose UPDATE changed one row delivers it, so two workers, or a worker and a restarted one,
never both send it (STYLE.md point 6). The price of that: a worker that dies between the
claim and the delivery loses the alert rather than sending it twice.

Channels: email (Django's email backend), a Slack-compatible webhook (`{"text": ...}`), and a
generic JSON webhook signed with HMAC-SHA256 in `X-Airboard-Signature: sha256=<hex>`.
Webhooks retry on network errors, 429 and 5xx, a bounded number of times with exponential
backoff. Every delivery is logged as a `Delivery` with the URL redacted; secrets never are.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.utils import timezone

from billing.choices import AlertKind, ChannelKind, DeliveryStatus
from billing.costs import reports
from billing.models import AlertChannel, BudgetAlert, Delivery, UsagePolicy
from billing.policies.budget import PolicyStatus
from billing.prices.money import format_usd, to_cents
from dashboard.kit.outbound import REFUSED, SIGNATURE_HEADER, redact_url, send, sign

logger = logging.getLogger(__name__)
# Error text kept per delivery: enough to read the cause, never a whole HTML error page.
MAX_ERROR = 500


@dataclass(frozen=True)
class Notice:
    """What to tell a policy's channels: a one-line text and a JSON payload for webhooks."""

    subject: str
    text: str
    payload: dict[str, Any]


# --- Helpers (pure) ------------------------------------------------------------------------


def _money(value: Decimal | None) -> str | None:
    return None if value is None else reports.decimal_str(to_cents(value))


def alert_notice(alert: BudgetAlert) -> Notice:
    """The subject, text and payload of a budget alert."""
    name, budget = alert.policy.name, _money(alert.budget_usd)
    # The text is read by people, so its money is as the pages print it; the payload's is a number.
    spent, shown_budget = format_usd(alert.spend_usd), format_usd(alert.budget_usd)
    if alert.kind == AlertKind.FORECAST:
        text = (f"Policy {name} is forecast to spend {format_usd(alert.forecast_usd)} this period, over "
                f"{alert.threshold}% of its {shown_budget} budget ({spent} spent so far).")  # fmt: skip
    else:
        text = (f"Policy {name} has spent {spent}, {alert.threshold}% or more of its "
                f"{shown_budget} budget for the period from {alert.period_start}.")  # fmt: skip
    payload = {
        "event": "budget_alert", "policy": name, "kind": alert.kind, "threshold": alert.threshold,
        "period_start": alert.period_start.isoformat(), "spend_usd": _money(alert.spend_usd),
        "forecast_usd": _money(alert.forecast_usd), "budget_usd": budget, "text": text,
    }  # fmt: skip
    return Notice(f"[Airboard] {name}: {alert.get_kind_display().lower()} {alert.threshold}%", text, payload)


def crossed(status: PolicyStatus) -> list[tuple[str, int]]:
    """(kind, threshold) pairs the status has reached: spend thresholds, and forecast ones
    the forecast passes while actual spend has not reached them yet."""
    budget = status.budget
    if not budget:
        return []
    out = [(AlertKind.SPEND.value, t) for t in status.policy.alert_thresholds if status.spend * 100 >= budget * t]
    if status.forecast is not None:
        out += [
            (AlertKind.FORECAST.value, t)
            for t in status.policy.forecast_thresholds
            if status.forecast * 100 > budget * t and status.spend * 100 < budget * t
        ]
    return out


# --- Claim and fire ------------------------------------------------------------------------


def claim_alerts(status: PolicyStatus, now: datetime) -> list[BudgetAlert]:
    """Alerts of `status` this caller won: inserted if new, then claimed with a conditional UPDATE."""
    pairs = crossed(status)
    if not pairs:
        return []
    policy = status.policy
    assert policy.budget_usd is not None  # crossed() finds thresholds only under a budget
    BudgetAlert.objects.bulk_create(
        [
            BudgetAlert(
                policy=policy,
                period_start=status.period_start,
                threshold=threshold,
                kind=kind,
                spend_usd=to_cents(status.spend),
                forecast_usd=status.forecast,
                budget_usd=policy.budget_usd,
                created_at=now,
            )
            for kind, threshold in pairs
        ],
        ignore_conflicts=True,
    )
    won = []
    for kind, threshold in pairs:
        claim = BudgetAlert.objects.filter(
            policy=policy, period_start=status.period_start, threshold=threshold, kind=kind, fired_at__isnull=True
        )
        # Only the caller whose UPDATE changes the row fires it; any other sees 0 rows changed.
        if claim.update(fired_at=now, spend_usd=to_cents(status.spend), forecast_usd=status.forecast) == 1:
            won.append(
                BudgetAlert.objects.select_related("policy").get(
                    policy=policy, period_start=status.period_start, threshold=threshold, kind=kind
                )
            )
    return won


def fire(status: PolicyStatus, now: datetime | None = None) -> list[BudgetAlert]:
    """Claim the thresholds `status` crossed and deliver the ones this caller won."""
    now = now or timezone.now()
    alerts = claim_alerts(status, now)
    for alert in alerts:
        notify(status.policy, alert_notice(alert), alert=alert)
    return alerts


# --- Delivery ------------------------------------------------------------------------------


def notify(policy: UsagePolicy, notice: Notice, alert: BudgetAlert | None = None) -> list[Delivery]:
    """Send `notice` to every channel of the policy; one Delivery row each."""
    out = []
    for channel in policy.channels.all():
        if channel.kind == ChannelKind.EMAIL:
            out.append(_send_email(channel, notice, alert))
        else:
            out.append(_send_webhook(channel, notice, alert))
    return out


def _send_email(channel: AlertChannel, notice: Notice, alert: BudgetAlert | None) -> Delivery:
    recipients = [a.strip() for a in channel.target.split(",") if a.strip()]
    status, error = DeliveryStatus.SENT, ""
    try:
        send_mail(notice.subject, notice.text, settings.DEFAULT_FROM_EMAIL, recipients)
    except Exception as exc:
        status, error = DeliveryStatus.FAILED, f"{type(exc).__name__}: {exc}"[:MAX_ERROR]
    return Delivery.objects.create(
        policy=channel.policy, alert=alert, channel=channel, channel_kind=channel.kind,
        target=", ".join(recipients), status=status, error=error, attempts=1, at=timezone.now(),
    )  # fmt: skip


def webhook_request(channel: AlertChannel, notice: Notice) -> tuple[bytes, dict[str, str]]:
    """The body and headers a channel's webhook gets: Slack `{"text"}` or signed JSON."""
    payload = {"text": notice.text} if channel.kind == ChannelKind.SLACK else notice.payload
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "Airboard"}
    if channel.kind == ChannelKind.WEBHOOK and channel.secret:
        headers[SIGNATURE_HEADER] = sign(channel.secret, body)
    return body, headers


def _retryable(code: int | None) -> bool:
    return code is None or code == 429 or code >= 500


def _send_webhook(channel: AlertChannel, notice: Notice, alert: BudgetAlert | None) -> Delivery:
    """POST with bounded retries (AIRBOARD_WEBHOOK_RETRIES) and exponential backoff."""
    body, headers = webhook_request(channel, notice)
    retries = settings.AIRBOARD_WEBHOOK_RETRIES
    backoff = settings.AIRBOARD_WEBHOOK_BACKOFF_SECONDS
    attempts, code, error = 0, None, ""
    for attempt in range(retries + 1):
        attempts = attempt + 1
        code, error = send(channel.target, body, headers, settings.AIRBOARD_WEBHOOK_TIMEOUT_SECONDS)
        if code is not None and 200 <= code < 300:
            error = ""
            break
        if error.startswith(REFUSED) or not _retryable(code) or attempt == retries:
            break
        time.sleep(backoff * 2**attempt)
    ok = code is not None and 200 <= code < 300
    target = redact_url(channel.target)
    if not ok:
        logger.warning("webhook delivery to %s failed after %d attempt(s): %s", target, attempts, error)
    return Delivery.objects.create(
        policy=channel.policy, alert=alert, channel=channel, channel_kind=channel.kind, target=target,
        status=DeliveryStatus.SENT if ok else DeliveryStatus.FAILED, status_code=code, error=error,
        attempts=attempts, at=timezone.now(),
    )  # fmt: skip
