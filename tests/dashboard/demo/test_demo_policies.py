"""The demo ships the usage policies its runs name, and their alerts fire (dashboard.demo.policies)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from billing.models import BudgetAlert, UsagePolicy
from billing.policies import budget
from dashboard.demo.seed import TEAMS
from runs.models import Run

pytestmark = pytest.mark.django_db


def test_seed_demo_creates_the_named_policies_and_fires_their_alerts() -> None:
    out = StringIO()
    call_command("seed_demo", "--runs", "60", "--without-advice-examples", stdout=out)
    named = set(Run.objects.filter(is_demo=True).values_list("usage_policy_name", flat=True))
    assert {t.usage_policy for t in TEAMS} <= set(UsagePolicy.objects.values_list("name", flat=True)) | {""}
    assert named - {""} <= set(UsagePolicy.objects.values_list("name", flat=True))
    vision = UsagePolicy.objects.get(name="vision-gpu-training")
    status = budget.evaluate(vision)
    assert status.spend > 0 and status.exhausted
    assert BudgetAlert.objects.filter(policy=vision, fired_at__isnull=False).exists()
    speech = UsagePolicy.objects.get(name="speech-asr")
    assert not budget.evaluate(speech).exhausted
    # A second seed (the data exists) leaves the policies as they are: no duplicates.
    call_command("seed_demo", "--runs", "60", "--without-advice-examples", stdout=StringIO())
    assert UsagePolicy.objects.count() == len(TEAMS)
