"""Alert webhooks (dashboard/kit/outbound.py): no private, loopback, link-local or metadata destinations,
checked when the channel is saved and again at send time; no redirects; only staff read network errors.

The receivers are real HTTP servers on 127.0.0.1 run by the test.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from billing.choices import ChannelKind, DeliveryStatus
from billing.models import AlertChannel, Delivery, UsagePolicy
from billing.policies import alerts
from dashboard.kit import outbound

NOTICE = alerts.Notice("[Airboard] test", "text", {"event": "test"})


@dataclass
class Receiver:
    url: str = ""
    hits: list[str] = field(default_factory=list)
    redirect_to: str = ""


def serve(receiver: Receiver) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            receiver.hits.append(f"POST {self.path}")
            self._answer()

        def do_GET(self) -> None:
            receiver.hits.append(f"GET {self.path}")
            self._answer()

        def _answer(self) -> None:
            if receiver.redirect_to:
                self.send_response(302)
                self.send_header("Location", receiver.redirect_to)
            else:
                self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    receiver.url = f"http://127.0.0.1:{server.server_port}/hook"
    return server


@pytest.fixture
def receivers() -> Iterator[tuple[Receiver, Receiver]]:
    first, second = Receiver(), Receiver()
    servers = [serve(first), serve(second)]
    yield first, second
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def policy(world, settings) -> UsagePolicy:
    settings.AIRBOARD_WEBHOOK_BACKOFF_SECONDS = 0
    settings.AIRBOARD_WEBHOOK_RETRIES = 2
    policy = UsagePolicy.objects.create(name="vision-research", budget_usd=Decimal("1000"))
    policy.teams.add(world.vision)
    return policy


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://localhost:8080/hook",
        "http://[::1]/hook",
        "http://0.0.0.0/hook",
        "http://10.0.0.5/hook",
        "http://192.168.1.1/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://metadata.google.internal/computeMetadata/v1/",
    ],
)
def test_a_private_or_metadata_destination_is_refused_when_saved(world, policy, url: str) -> None:
    bob = world.client_for(world.bob)
    world.bob.user_permissions.add(Permission.objects.get(codename="manage_policies"))
    response = bob.post(reverse("policy_channel_add", args=[policy.pk]), {"kind": "webhook", "target": url})
    assert response.status_code == 400
    assert "This URL cannot receive webhooks" in response.content.decode()
    assert not AlertChannel.objects.exists()
    assert outbound.destination_problem(url)


def test_metadata_names_are_refused_whatever_they_resolve_to() -> None:
    assert outbound.destination_problem("http://metadata/computeMetadata/v1/") == "metadata is a cloud metadata service"
    assert "metadata service" in outbound.destination_problem("http://METADATA.google.internal./x")


def test_a_destination_is_vetted_again_at_send_time(world, policy, receivers) -> None:
    first, _ = receivers
    # Saved while allowed (or while its name resolved elsewhere): the send refuses it, once, untried.
    channel = AlertChannel.objects.create(policy=policy, kind=ChannelKind.WEBHOOK, target=first.url, secret="s")

    [delivery] = alerts.notify(policy, NOTICE)

    assert first.hits == []
    assert (delivery.status, delivery.status_code, delivery.attempts) == (DeliveryStatus.FAILED, None, 1)
    assert delivery.error.startswith("refused: 127.0.0.1 resolves to a private")
    assert delivery.channel == channel


def test_redirects_are_not_followed(world, policy, receivers, settings) -> None:
    settings.AIRBOARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS = True  # both receivers are on 127.0.0.1
    first, second = receivers
    first.redirect_to = second.url
    AlertChannel.objects.create(policy=policy, kind=ChannelKind.SLACK, target=first.url)

    [delivery] = alerts.notify(policy, NOTICE)

    assert first.hits == ["POST /hook"]  # a 3xx is final: not retried, not followed
    assert second.hits == []
    assert (delivery.status, delivery.status_code) == (DeliveryStatus.FAILED, 302)


def test_members_see_a_deliverys_status_and_staff_its_error(world, policy) -> None:
    channel = AlertChannel.objects.create(policy=policy, kind=ChannelKind.SLACK, target="https://hooks.example.com/x")
    Delivery.objects.create(
        policy=policy, channel=channel, channel_kind=channel.kind, target="https://hooks.example.com/***",
        status=DeliveryStatus.FAILED, error="ConnectionRefusedError: [Errno 111] Connection refused", attempts=3,
        at=timezone.now(),
    )  # fmt: skip
    detail = reverse("policy_detail", args=[policy.pk])
    member = world.client_for(world.alice)
    page = member.get(detail).content.decode()
    assert "Failed" in page and "Connection refused" not in page
    csv_text = member.get(detail, {"format": "csv", "table": "deliveries"}).content.decode()
    assert "Connection refused" not in csv_text
    assert "Connection refused" in world.client_for(world.sam).get(detail).content.decode()
