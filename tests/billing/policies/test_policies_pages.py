"""Policy pages: who sees and edits what, form validation, versions with diffs, rollback."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from billing.models import AlertChannel, PolicyVersion, UsagePolicy
from billing.policies import versions


@pytest.fixture
def policy(world) -> UsagePolicy:
    policy = UsagePolicy.objects.create(name="vision-research", budget_usd=Decimal("1000"))
    policy.teams.add(world.vision)
    versions.record_version(policy, world.sam, note="created")
    return policy


@pytest.fixture
def admin_bob(world):
    """bob, a vision member, holding the policy-admin permission (not staff)."""
    world.bob.user_permissions.add(Permission.objects.get(codename="manage_policies"))
    return world.client_for(world.bob)


FORM = {
    "name": "nlp-llm", "description": "", "teams": [], "budget_usd": "2500", "period": "quarter",
    "period_start_day": "1", "alert_thresholds": "50, 80, 100", "forecast_thresholds": "100", "action": "refuse",
    "allowed_accelerator_types": ["GPU_8xH100"], "max_num_accelerators": "16", "max_timeout_minutes": "",
    "max_retries": "2", "allowed_regions": "us-west-2", "allow_cross_region": "on", "idle_gpu_percent": "",
    "idle_warn_minutes": "", "idle_cancel_minutes": "",
}  # fmt: skip


def urls(policy: UsagePolicy) -> dict[str, str]:
    return {
        "list": reverse("policy_list"),
        "detail": reverse("policy_detail", args=[policy.pk]),
        "versions": reverse("policy_versions", args=[policy.pk]),
        "edit": reverse("policy_edit", args=[policy.pk]),
    }


def test_anonymous_goes_to_login(world, policy) -> None:
    for url in [*urls(policy).values(), reverse("policy_new")]:
        response = Client().get(url)
        assert response.status_code == 302 and "/login" in response["Location"], url


def test_member_reads_only(world, policy) -> None:
    alice = world.client_for(world.alice)
    for name in ("list", "detail", "versions"):
        assert alice.get(urls(policy)[name]).status_code == 200
    assert b"vision-research" in alice.get(urls(policy)["list"]).content
    assert alice.get(urls(policy)["edit"]).status_code == 403
    assert alice.get(reverse("policy_new")).status_code == 403
    assert alice.post(reverse("policy_rollback", args=[policy.pk, 1])).status_code == 403
    assert b"Edit</a>" not in alice.get(urls(policy)["detail"]).content


def test_other_team_sees_nothing(world, policy) -> None:
    charlie = world.client_for(world.charlie)
    assert b"vision-research" not in charlie.get(urls(policy)["list"]).content
    for name in ("detail", "versions", "edit"):
        assert charlie.get(urls(policy)[name]).status_code == 404
    assert charlie.post(reverse("policy_rollback", args=[policy.pk, 1])).status_code == 404


def test_admin_creates_with_a_version(world, admin_bob) -> None:
    response = admin_bob.post(reverse("policy_new"), {**FORM, "teams": [world.nlp.pk]})
    created = UsagePolicy.objects.get(name="nlp-llm")
    assert response.status_code == 302 and response["Location"] == reverse("policy_detail", args=[created.pk])
    assert created.allowed_accelerator_types == ["GPU_8xH100"] and created.alert_thresholds == [50, 80, 100]
    version = created.versions.get()
    assert (version.number, version.user, version.snapshot["teams"]) == (1, world.bob, ["nlp"])
    # An admin sees every policy, a team's or not.
    assert admin_bob.get(reverse("policy_detail", args=[created.pk])).status_code == 200


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"alert_thresholds": "50, lots"}, "alert_thresholds", "not a whole percent"),
        ({"allowed_regions": "Mars"}, "allowed_regions", "not a region name"),
        ({"budget_usd": "-5"}, "budget_usd", "more than $0"),
        ({"budget_usd": "", "action": "cancel"}, "action", "needs a budget"),
        ({"idle_gpu_percent": "5"}, "idle_warn_minutes", "needs minutes"),
        ({"idle_gpu_percent": "5", "idle_warn_minutes": "30", "idle_cancel_minutes": "10"}, "idle_cancel_minutes",
         "more minutes than the warning"),
        ({"period_start_day": "31"}, "period_start_day", "less than or equal to 28"),
    ],
)  # fmt: skip
def test_form_validation_messages(world, admin_bob, changes, field, message) -> None:
    response = admin_bob.post(reverse("policy_new"), {**FORM, **changes})
    assert response.status_code == 200
    assert message in " ".join(response.context["form"].errors[field])
    assert b"was not saved" in response.content


def test_duplicate_name_is_refused(world, admin_bob, policy) -> None:
    response = admin_bob.post(reverse("policy_new"), {**FORM, "name": "vision-research"})
    assert "A policy has this name." in response.content.decode()


def test_edit_diff_and_rollback(world, policy) -> None:
    sam = world.client_for(world.sam)
    data = {**FORM, "name": "vision-research", "teams": [world.vision.pk], "budget_usd": "1500"}
    assert sam.post(urls(policy)["edit"], data).status_code == 302
    v2 = policy.versions.get(number=2)
    changed = {c["field"]: (c["old"], c["new"]) for c in v2.diff}
    assert changed["budget_usd"] == ("1000.00", "1500.00")
    assert changed["max_retries"] == (None, 2)
    page = sam.get(urls(policy)["versions"]).content.decode()
    assert "Version 2" in page and "$1,500.00" in page and "Roll back to version 1" in page
    # Saving the same values again makes no version.
    sam.post(urls(policy)["edit"], data)
    assert policy.versions.count() == 2
    # Rollback is confirmed first (a GET, or a POST without `confirm`, changes nothing); the
    # confirming POST needs CSRF from a browser.
    rollback = reverse("policy_rollback", args=[policy.pk, 1])
    assert sam.get(rollback).status_code == 200 and sam.post(rollback).status_code == 200
    assert policy.versions.count() == 2
    csrf = Client(enforce_csrf_checks=True)
    csrf.force_login(world.sam)
    assert csrf.post(rollback, {"confirm": "yes"}).status_code == 403
    assert sam.post(rollback, {"confirm": "yes"}).status_code == 302
    policy.refresh_from_db()
    assert policy.budget_usd == Decimal("1000") and policy.max_retries is None and policy.period == "month"
    v3 = policy.versions.get(number=3)
    assert v3.note == "rolled back to version 1"
    assert {c["field"]: c["new"] for c in v3.diff}["budget_usd"] == "1000.00"
    assert PolicyVersion.objects.filter(policy=policy).count() == 3


def test_webhook_secret_shown_once(world, policy) -> None:
    sam = world.client_for(world.sam)
    url = reverse("policy_channel_add", args=[policy.pk])
    response = sam.post(url, {"kind": "webhook", "target": "https://hooks.example.com/x", "secret": ""})
    channel = AlertChannel.objects.get()
    assert len(channel.secret) > 30
    assert channel.secret in response.content.decode()
    page = sam.get(urls(policy)["detail"]).content.decode()
    assert channel.secret not in page and f"{channel.secret[:6]}…" in page
    bad = sam.post(url, {"kind": "email", "target": "not-an-address"})
    assert bad.status_code == 400 and "is not an email address" in bad.content.decode()


def test_list_shows_spend_and_chart(world, policy) -> None:
    page = world.client_for(world.alice).get(reverse("policy_list")).content.decode()
    assert 'id="burn-' in page and "Remaining" in page


def test_a_webhook_url_token_is_never_shown_and_the_logs_export_as_csv(world, policy) -> None:
    slack = "https://hooks.slack.com/services/T0001/B0002/tokentokentokentoken"
    AlertChannel.objects.create(policy=policy, kind="slack", target=slack)
    alice = world.client_for(world.alice)
    page = alice.get(urls(policy)["detail"]).content.decode()
    assert "tokentokentoken" not in page and "hooks.slack.com/services/***" in page
    for table, first in (("alerts", "fired_at"), ("deliveries", "at"), ("actions", "at")):
        response = alice.get(urls(policy)["detail"], {"format": "csv", "table": table})
        assert response["Content-Type"].startswith("text/csv")
        assert response.content.decode().splitlines()[0].startswith(first)
    assert world.client_for(world.charlie).get(urls(policy)["detail"], {"format": "csv"}).status_code == 404
