"""A policy two teams share: team B's pushed runs and egress, however shaped, cannot move its spend
past what B's GPUs could have cost in the period, and never cancel team A's run (issue 33).

Before: a 512-GPU run ended in 2199, 1,000 overlapping attempts and one egress record of 2^63-1
bytes put $983 M against the $100,000 budget, and enforcement flagged A's running run.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.test import Client
from django.urls import reverse

from billing.choices import SpentAction
from billing.costs import egress, rollups
from billing.models import AcceleratorPrice, EgressPrice, PolicyAction, UsagePolicy
from billing.policies import budget, enforcement, pushed
from dashboard.models import ApiKey, ApiKeyRole
from runs.choices import RunOrigin, RunStatus
from runs.models import Run
from tests.conftest import T0, World, make_run

NOW = T0 + timedelta(hours=1)
BOOK = datetime(2026, 1, 1, tzinfo=UTC)
ACCELERATOR_HOUR = Decimal("10")
EGRESS_GB = Decimal("0.02")
BUDGET = Decimal("100000")


@pytest.fixture(autouse=True)
def _now() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def shared(world: World) -> UsagePolicy:
    AcceleratorPrice.objects.create(accelerator_type="GPU_8xH100", region="us-west-2", effective_from=BOOK,
                                    usd_per_hour=ACCELERATOR_HOUR)  # fmt: skip
    EgressPrice.objects.create(source_region="us-west-2", destination_region="us-east-1", effective_from=BOOK,
                               usd_per_gb=EGRESS_GB)  # fmt: skip
    policy = UsagePolicy.objects.create(name="shared", budget_usd=BUDGET, action=SpentAction.CANCEL)
    policy.teams.add(world.vision, world.nlp)
    return policy


def b_key(world: World) -> Client:
    raw = ApiKey.issue(world.nlp, ApiKeyRole.INGEST, name="b", source="serverless")[1]
    return Client(headers={"authorization": f"Bearer {raw}"})


def run_body(external_id: str, **body: object) -> dict:
    return {"external_id": external_id, "source": "serverless", "accelerator_type": "GPU_8xH100",
            "num_accelerators": 512, "region": "us-west-2", "usage_policy_name": "shared", **body}  # fmt: skip


def b_attacks(client: Client) -> None:
    """Every shape the issue tried, and the largest that are plausible, from team B's key."""
    hour_ago = (NOW - timedelta(hours=1)).isoformat()
    post = lambda body: client.post("/api/v1/runs", body, content_type="application/json")  # noqa: E731
    started = [{"number": 1, "status": "running", "started_at": hour_ago}]
    assert post(run_body("b-big", status="running", started_at=hour_ago, attempts=started)).status_code == 201
    # (a) an end in 2199, run and attempt, in a second request.
    end = "2199-01-01T00:00:00Z"
    assert post(run_body("b-big", ended_at=end, attempts=[{"number": 1, "ended_at": end}])).status_code == 422
    # (b) 1,000 overlapping attempts, each within 14 days.
    many = [{"number": n, "started_at": (NOW - timedelta(days=13)).isoformat(), "ended_at": NOW.isoformat()}
            for n in range(1, 1001)]  # fmt: skip
    assert post(run_body("b-many", status="failed", attempts=many)).status_code == 422
    # A start a year ago, a start in 1970.
    assert post(run_body("b-old", started_at="1970-01-01T00:00:00Z", status="running")).status_code == 422
    # (c) one egress record of 2^63-1 bytes; then the most a day of 512 GPUs may report.
    record = {"run": "b-big", "source_region": "us-west-2", "destination_region": "us-east-1", "ts": NOW.isoformat()}
    egress_post = lambda b: client.post("/api/v1/egress", {"records": [record | {"bytes": b}]},  # noqa: E731
                                        content_type="application/json")  # fmt: skip
    assert egress_post(9223372036854775807).status_code == 422
    assert egress_post(egress.max_bytes_per_day(512)).status_code == 201


def test_b_cannot_spend_past_its_gpus_and_never_cancels_a(world: World, shared: UsagePolicy) -> None:
    a_run = make_run(world.vision, "a-1", usage_policy_name="shared", status=RunStatus.RUNNING, ended_at=None)
    b_attacks(b_key(world))
    rollups.refresh_changed(now=NOW)

    status = budget.evaluate(shared, NOW)
    # What B's GPUs could have cost in the period so far: each pushed run's accelerators for every
    # hour of the period, and each day's egress at the line-rate bound.
    period_hours = (
        int((NOW - datetime.combine(status.period_start, datetime.min.time(), UTC)).total_seconds()) // 3600 + 1
    )
    b_gpus = sum(Run.objects.filter(team=world.nlp).values_list("num_accelerators", flat=True))
    b_days = (NOW.date() - status.period_start).days + 1
    b_bound = b_gpus * period_hours * ACCELERATOR_HOUR + egress.max_bytes_per_day(b_gpus) * b_days * EGRESS_GB / 10**9
    a_cost = 8 * ACCELERATOR_HOUR  # A's run: 8 GPUs for the hour since T0
    assert status.exhausted  # B's plausible egress alone is tens of millions
    assert status.spend <= a_cost + b_bound
    assert status.spend < Decimal("98_300_000")  # was $983 M: a tenth of it at most

    result = enforcement.enforce_all(NOW)

    a_run.refresh_from_db()
    assert a_run.cancel_requested_at is None
    assert not PolicyAction.objects.filter(run=a_run).exists()
    # B's own running run is cancelled by its own pushed spend (through its flag).
    b_run = Run.objects.get(external_id="b-big")
    assert b_run.origin == RunOrigin.KEY and b_run.cancel_requested_at is not None
    assert list(PolicyAction.objects.values_list("run__external_id", flat=True)) == ["b-big"]
    assert result.errors == []


def test_a_collectors_spend_still_cancels_every_run(world: World, shared: UsagePolicy) -> None:
    """The rule withholds only other teams' pushed data: a budget spent by confirmed runs cancels as before."""
    shared.budget_usd = Decimal("50")
    shared.save()
    a_run = make_run(world.vision, "a-1", usage_policy_name="shared", status=RunStatus.RUNNING, ended_at=None)
    make_run(world.nlp, "b-collected", usage_policy_name="shared", num_accelerators=8)  # $80, collector's
    rollups.refresh_changed(now=NOW)

    enforcement.enforce_all(NOW)

    a_run.refresh_from_db()
    assert a_run.cancel_requested_at is not None


def test_the_policy_page_names_a_team_whose_pushed_data_alone_spends_the_budget(
    world: World, shared: UsagePolicy
) -> None:
    make_run(world.vision, "a-1", usage_policy_name="shared", status=RunStatus.RUNNING, ended_at=None)
    b_attacks(b_key(world))
    rollups.refresh_changed(now=NOW)
    parts = pushed.pushed_spend(budget.evaluate(shared, NOW))
    assert [name for name, _ in parts.alone(BUDGET)] == ["nlp"]
    assert parts.confirmed_for(world.vision.pk) < BUDGET <= parts.confirmed_for(world.nlp.pk)

    alice = world.client_for(world.alice)  # of team vision: B's name is not hers to see
    page = alice.get(reverse("policy_detail", args=[shared.pk])).content.decode()
    assert "that another team pushed through the API, which alone spends the budget" in page
    assert "that nlp pushed" not in page
    world.sam.is_staff = True
    world.sam.save()
    page = world.client_for(world.sam).get(reverse("policy_detail", args=[shared.pk])).content.decode()
    assert "that nlp pushed through the API, which alone spends the budget" in page
