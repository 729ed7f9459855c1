"""Issue 17's consistency property, on generated workspaces.

Serverless runs (retried, running, with egress and idle GPUs) and classic clusters (restarting,
autoscaling, resized, shared by several runs, some still up, one with no runs), rolled up an hour
before "now". At now:

- a team's month is the same on the overview, `/costs/`, `GET /api/v1/costs`, `/metrics`, the
  policy page and the sum of its run pages;
- a cluster's cost on the clusters page is its runs' shares plus its unattributed time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.costs import reports, rollups, spend
from billing.engine import cluster_costs, run_costs
from billing.models import AcceleratorPrice, EgressPrice, EgressRecord, InstancePrice, UsagePolicy
from billing.policies import budget
from billing.prices.money import to_cents
from dashboard.metrics import spend_by_team_and_policy
from runs.choices import RunSource, RunStatus
from runs.models import Attempt, Cluster, ClusterEvent, GpuMinute, Node, Run
from tests.conftest import World, make_run

BOOK = datetime(2026, 1, 1, tzinfo=UTC)
DAY0 = datetime(2026, 11, 2, tzinfo=UTC)
NOW = datetime(2026, 11, 6, 12, tzinfo=UTC)
ROLLED_UP = NOW - timedelta(hours=1)
POLICY = "research"

hours = st.integers(min_value=0, max_value=80)  # offsets from DAY0, before ROLLED_UP
spans = st.integers(min_value=1, max_value=12)


@st.composite
def serverless(draw: st.DrawFn) -> dict:
    start = draw(hours)
    return {
        "team": draw(st.sampled_from(["vision", "nlp"])),
        "start": start,
        "tries": draw(st.lists(spans, min_size=1, max_size=3)),  # hours of each attempt; retries are billed
        "running": draw(st.booleans()),
        "egress_gb": draw(st.integers(min_value=0, max_value=40)),
        "idle_minutes": draw(st.integers(min_value=0, max_value=20)),
        "policy": draw(st.booleans()),
    }


@st.composite
def cluster(draw: st.DrawFn) -> dict:
    autoscale = draw(st.booleans())
    return {
        "stretches": draw(st.lists(st.tuples(hours, spans), min_size=1, max_size=3)),
        "still_up": draw(st.booleans()),
        "autoscale_min": draw(st.integers(min_value=1, max_value=3)) if autoscale else None,
        "workers": draw(st.integers(min_value=0, max_value=2)),
        "resize_to": draw(st.none() | st.integers(min_value=0, max_value=4)),
        "runs": draw(st.lists(st.tuples(st.sampled_from(["vision", "nlp"]), hours, spans), max_size=3)),
    }


def build(world: World, plain: list[dict], clusters: list[dict]) -> tuple[list[Run], list[Cluster]]:
    teams = {"vision": world.vision, "nlp": world.nlp}
    AcceleratorPrice.objects.create(accelerator_type="GPU_8xH100", region="us-west-2", effective_from=BOOK,
                                    usd_per_hour="2.75")  # fmt: skip
    # A price change mid-workspace: every split at it must still add up.
    AcceleratorPrice.objects.create(accelerator_type="GPU_8xH100", region="us-west-2",
                                    effective_from=DAY0 + timedelta(hours=30), usd_per_hour="3.10")  # fmt: skip
    EgressPrice.objects.create(source_region="us-west-2", destination_region="us-east-1", effective_from=BOOK,
                               usd_per_gb="0.02")  # fmt: skip
    InstancePrice.objects.create(instance_type="g5.12xlarge", region="", effective_from=BOOK, usd_per_hour="5.67")
    InstancePrice.objects.create(instance_type="g5.xlarge", region="", effective_from=BOOK, usd_per_hour="1.01")
    runs: list[Run] = []
    for n, spec in enumerate(plain):
        start = DAY0 + timedelta(hours=spec["start"])
        ends, at = [], start
        for length in spec["tries"]:
            ends.append((at, at + timedelta(hours=length)))
            at += timedelta(hours=length, minutes=7)
        running = spec["running"]
        last_end = None if running else min(ends[-1][1], ROLLED_UP)
        run = make_run(teams[spec["team"]], f"s{n}", started_at=start, ended_at=last_end,
                       status=RunStatus.RUNNING if running else RunStatus.SUCCEEDED,
                       usage_policy_name=POLICY if spec["policy"] else "")  # fmt: skip
        attempt = run.attempts.get()
        attempt.ended_at = min(ends[0][1], ROLLED_UP) if len(ends) > 1 or not running else None
        attempt.save()
        for number, (a, b) in enumerate(ends[1:], start=2):
            last = number == len(ends)
            Attempt.objects.create(run=run, number=number, status=run.status, started_at=min(a, ROLLED_UP),
                                   ended_at=None if (last and running) else min(b, ROLLED_UP))  # fmt: skip
        if spec["egress_gb"]:
            EgressRecord.objects.create(run=run, source_region="us-west-2", destination_region="us-east-1",
                                        bytes=spec["egress_gb"] * 10**9, ts=start + timedelta(minutes=30))  # fmt: skip
        node = Node.objects.get(attempt=attempt)
        for m in range(spec["idle_minutes"]):
            GpuMinute.objects.create(run=run, node=node, gpu_index=m % 8, minute=start + timedelta(minutes=m // 8),
                                     utilization_gpu_max=0.0)  # fmt: skip
        runs.append(run)
    made: list[Cluster] = []
    for n, spec in enumerate(clusters):
        c = Cluster.objects.create(
            team=world.vision, cluster_id=f"c{n}", node_type_id="g5.12xlarge", driver_node_type_id="g5.xlarge",
            num_workers=spec["workers"], autoscale_min_workers=spec["autoscale_min"],
            autoscale_max_workers=8 if spec["autoscale_min"] else None, region="us-west-2",
            start_time=DAY0 - timedelta(days=200),  # the creation request: never an uptime start
        )  # fmt: skip
        at = DAY0
        stretches = []
        for gap, length in spec["stretches"]:
            begin = min(at + timedelta(hours=gap % 10), ROLLED_UP - timedelta(hours=1))
            end = min(begin + timedelta(hours=length), ROLLED_UP)
            stretches.append((begin, end))
            at = end + timedelta(minutes=1)
        for i, (begin, end) in enumerate(stretches):
            ClusterEvent.objects.create(cluster=c, ts=begin, kind="RESTARTING" if i else "STARTING",
                                        details={"user": "alice@example.com"})  # fmt: skip
            if spec["resize_to"] is not None and end - begin > timedelta(minutes=30):
                ClusterEvent.objects.create(cluster=c, ts=begin + timedelta(minutes=30), kind="UPSIZE_COMPLETED",
                                            details={"current_num_workers": spec["resize_to"]})  # fmt: skip
            last = i == len(stretches) - 1
            if not (last and spec["still_up"]) and end > begin:
                ClusterEvent.objects.create(cluster=c, ts=end, kind="TERMINATING",
                                            details={"reason": {"code": "INACTIVITY"}})  # fmt: skip
        for k, (team, start, length) in enumerate(spec["runs"]):
            begin = DAY0 + timedelta(hours=start)
            runs.append(make_run(teams[team], f"c{n}-{k}", source=RunSource.CLASSIC, cluster=c, accelerator_type="",
                                 num_accelerators=4, started_at=begin,
                                 ended_at=min(begin + timedelta(hours=length), ROLLED_UP),
                                 usage_policy_name=POLICY))  # fmt: skip
        made.append(c)
    return runs, made


def cents(value: Decimal) -> Decimal:
    return to_cents(value)  # as pages show it


@pytest.mark.django_db(transaction=False)
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(plain=st.lists(serverless(), max_size=4), clusters=st.lists(cluster(), max_size=3))
def test_one_month_on_every_surface_and_clusters_add_up(world: World, plain: list[dict], clusters: list[dict]) -> None:
    with transaction.atomic():
        runs, made = build(world, plain, clusters)
        policy = UsagePolicy.objects.create(name=POLICY, budget_usd=Decimal("1000000"))
        policy.teams.add(world.vision, world.nlp)
        with time_machine.travel(ROLLED_UP, tick=False):
            rollups.refresh_changed()
        with time_machine.travel(NOW, tick=False):
            team_ids = [world.vision.pk, world.nlp.pk]
            accrued = spend.accrual(team_ids, NOW)
            month = {row.team_id: row.usd for row in spend.team_month(team_ids, NOW)}
            answers = run_costs(runs, NOW)
            metrics = {(labels["team"]): Decimal(0) for labels, _ in spend_by_team_and_policy(NOW).samples}
            for labels, value in spend_by_team_and_policy(NOW).samples:
                metrics[labels["team"]] += Decimal(str(value))
            for team in (world.vision, world.nlp):
                filters = reports.CostFilters(NOW.date().replace(day=1), NOW.date(), team_id=team.pk)
                extra = reports.accrual_for(accrued, team_ids, filters)
                costs_total = reports.totals(reports.rows_for(team_ids, filters), extra)["total_usd"]
                by_runs = sum((a.breakdown.total for r in runs if r.team_id == team.pk for a in [answers[r.pk]]),
                              Decimal(0))  # fmt: skip
                expected = cents(month[team.pk])
                assert cents(costs_total) == expected, ("/costs/", team.name)
                assert cents(by_runs) == expected, ("run pages", team.name)
                assert cents(metrics.get(team.name, Decimal(0))) == expected, ("/metrics", team.name)
                assert cents(reports.month_to_date([team.pk], NOW, accrued).spend) == expected, ("forecast", team.name)
            # The policy covers both teams and every classic run; its spend is their policy runs'.
            status = budget.evaluate(policy, NOW)
            policy_runs = [r for r in runs if r.usage_policy_name == POLICY]
            assert cents(status.spend) == cents(sum((answers[r.pk].breakdown.total for r in policy_runs), Decimal(0)))
            for c, cost in zip(made, cluster_costs(made, NOW), strict=True):
                members = [answers[r.pk].breakdown.compute for r in runs if r.cluster_id == c.pk]
                assert cost.uptime_cost == sum(members, Decimal(0)) + cost.unattributed_cost
                assert cost.unattributed_cost == 0 or not members
        transaction.set_rollback(True)
