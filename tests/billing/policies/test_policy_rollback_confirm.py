"""Rolling a policy back is confirmed first, on a page of its own, and only by policy admins.

Issue 35 found rollback a one-click button on the history page. Now the history links to a
confirmation page that shows what the rollback would change; only its form (a plain POST with
`confirm=yes`, no JavaScript) rolls back. A POST without it shows the same page and changes nothing.
"""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from billing.models import UsagePolicy
from billing.policies import versions
from tests.conftest import World


@pytest.fixture
def policy(world: World) -> UsagePolicy:
    """Version 1 at $1,000 for vision; version 2 at $6,254.12 with a retry limit."""
    policy = UsagePolicy.objects.create(name="vision-research", budget_usd=Decimal("1000"))
    policy.teams.add(world.vision)
    versions.record_version(policy, world.sam, note="created")
    policy.budget_usd, policy.max_retries = Decimal("6254.12"), 2
    policy.save()
    versions.record_version(policy, world.sam, note="edited")
    return policy


def url(policy: UsagePolicy, number: int = 1) -> str:
    return reverse("policy_rollback", args=[policy.pk, number])


def test_the_history_links_to_a_confirmation_rather_than_rolling_back(world, policy) -> None:
    html = world.client_for(world.sam).get(reverse("policy_versions", args=[policy.pk])).content.decode()
    assert f'<a class="button button-quiet" href="{url(policy)}">Roll back to version 1' in html
    assert f'action="{url(policy)}"' not in html


def test_the_confirmation_page_shows_what_would_change_and_changes_nothing(world, policy) -> None:
    sam = world.client_for(world.sam)
    for response in (sam.get(url(policy)), sam.post(url(policy)), sam.post(url(policy), {"confirm": "maybe"})):
        assert response.status_code == 200
        html = response.content.decode()
        assert "roll back to version 1?" in html
        assert re.search(r"Budget \(USD\)</th><td class=\"old\"><del>\$6,254\.12</del></td>"
                         r"<td class=\"new\"><ins>\$1,000\.00</ins>", html)  # fmt: skip
        assert re.search(r"Most retries a run may set</th><td class=\"old\"><del>2</del></td>"
                         r"<td class=\"new\"><ins>no limit</ins>", html)  # fmt: skip
        assert '<input type="hidden" name="confirm" value="yes">' in html
    policy.refresh_from_db()
    assert policy.budget_usd == Decimal("6254.12") and policy.versions.count() == 2


def test_confirming_rolls_back_exactly_what_the_page_showed(world, policy) -> None:
    shown = versions.rollback_changes(policy, policy.versions.get(number=1))
    response = world.client_for(world.sam).post(url(policy), {"confirm": "yes"})
    assert response.status_code == 302 and response["Location"] == reverse("policy_versions", args=[policy.pk])
    policy.refresh_from_db()
    assert policy.budget_usd == Decimal("1000") and policy.max_retries is None
    new = policy.versions.get(number=3)
    assert new.note == "rolled back to version 1" and versions.readable(new.diff) == shown


def test_a_team_deleted_since_is_not_promised_back(world, policy) -> None:
    """Rollback restores the version's teams that still exist; the page says so, not the stored list."""
    policy.teams.add(world.nlp)
    versions.record_version(policy, world.sam, note="edited")
    second = policy.versions.get(number=2)
    second.snapshot = {**second.snapshot, "teams": ["gone-team", "vision"]}
    second.save()
    shown = {c.field: c.new for c in versions.rollback_changes(policy, second)}
    assert shown["teams"] == "vision"
    assert world.client_for(world.sam).post(url(policy, 2), {"confirm": "yes"}).status_code == 302
    assert list(policy.teams.values_list("name", flat=True)) == ["vision"]


def test_a_version_the_policy_already_matches_offers_no_button(world, policy) -> None:
    html = world.client_for(world.sam).get(url(policy, 2)).content.decode()
    assert "already matches version 2" in html and 'name="confirm"' not in html


def test_only_policy_admins_may_see_or_confirm_a_rollback(world, policy) -> None:
    alice = world.client_for(world.alice)  # vision member: reads the policy, may not change it
    assert alice.get(url(policy)).status_code == 403
    assert alice.post(url(policy), {"confirm": "yes"}).status_code == 403
    charlie = world.client_for(world.charlie)  # nlp: the policy is not theirs to know of
    assert charlie.get(url(policy)).status_code == 404
    assert charlie.post(url(policy), {"confirm": "yes"}).status_code == 404
    assert Client().post(url(policy), {"confirm": "yes"}).status_code == 302  # to the login page
    policy.refresh_from_db()
    assert policy.versions.count() == 2 and policy.budget_usd == Decimal("6254.12")
    # A vision member holding the policy-admin permission may.
    world.bob.user_permissions.add(Permission.objects.get(codename="manage_policies"))
    assert world.client_for(world.bob).post(url(policy), {"confirm": "yes"}).status_code == 302
    assert policy.versions.count() == 3


def test_a_version_that_does_not_exist_is_404(world, policy) -> None:
    sam = world.client_for(world.sam)
    assert sam.get(url(policy, 9)).status_code == 404
    assert sam.get(url(policy, 2**70)).status_code == 404  # past any integer column: no such version, not a 500
    assert sam.post(url(policy, 9), {"confirm": "yes"}).status_code == 404
    assert sam.put(url(policy)).status_code == 405


def test_the_confirming_form_needs_the_csrf_token(world, policy) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.sam)
    assert client.post(url(policy), {"confirm": "yes"}).status_code == 403
    assert policy.versions.count() == 2
