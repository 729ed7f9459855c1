"""Alert webhook URLs and signing secrets are stored encrypted and still usable."""

from __future__ import annotations

import pytest
from django.db import connection

from billing.models import AlertChannel, UsagePolicy
from billing.policies.alerts import sign
from dashboard.kit.fields import decrypt, encrypt

SLACK_URL = "https://hooks.slack.com/services/T0001/B0002/abcdefghijklmnopqrstuvwx"
SIGNING_SECRET = "whsec_9f8e7d6c5b4a39281706f5e4d3c2b1a0"


@pytest.mark.django_db
def test_webhook_url_and_secret_are_ciphertext_in_the_database_and_plain_in_python() -> None:
    policy = UsagePolicy.objects.create(name="p", budget_usd="10")
    channel = AlertChannel.objects.create(policy=policy, kind="webhook", target=SLACK_URL, secret=SIGNING_SECRET)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT target, secret FROM {AlertChannel._meta.db_table} WHERE id = %s", [channel.pk])  # noqa: S608
        raw_target, raw_secret = cursor.fetchone()
    assert SLACK_URL not in raw_target and "abcdefghijkl" not in raw_target
    assert SIGNING_SECRET not in raw_secret
    stored = AlertChannel.objects.get(pk=channel.pk)
    assert (stored.target, stored.secret) == (SLACK_URL, SIGNING_SECRET)
    # Signing still uses the real secret: a receiver holding it verifies the signature.
    assert sign(stored.secret, b"{}") == sign(SIGNING_SECRET, b"{}")


def test_encryption_round_trips_and_a_wrong_key_says_so(settings) -> None:
    token = encrypt("s3cret")
    assert token != "s3cret" and decrypt(token) == "s3cret"
    assert decrypt("legacy plain value") == "legacy plain value"
    settings.AIRBOARD_ENCRYPTION_KEY = "another key"
    with pytest.raises(ValueError, match="AIRBOARD_ENCRYPTION_KEY"):
        decrypt(token)
