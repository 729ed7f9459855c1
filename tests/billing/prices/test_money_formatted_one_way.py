"""Money reads one way wherever people read it: "$6,254.12", from `billing.prices.money.format_usd`.

Issue 35 found the policy page's alerts table printing "$6254.12" beside "$6,254.12" elsewhere.
Every page goes through the `usd` template filter, every sentence Python writes for people
(admission refusals, alert emails, enforcement reasons, advice) through `format_usd`, the admin's
money columns too, and the burn-down's hover the same. CSV and JSON stay plain numbers: data.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import time_machine
from django.contrib.auth.models import User
from django.urls import reverse

from billing.choices import AlertKind, SpentAction
from billing.costs import rollups
from billing.models import BudgetAlert, CostDaily, UsagePolicy
from billing.policies import alerts, budget, charts
from billing.prices.money import format_usd
from runs.clusters.advice import Evidence, low_util_multi_gpu
from runs.launch.admission import admit_yaml
from runs.models import Run
from tests.conftest import ROOT, T0, World, make_run

NOW = T0 + timedelta(hours=1)
WORKLOAD = """\
experiment_name: llama-ft
compute:
  accelerator_type: GPU_8xH100
  num_accelerators: 8
command: python train.py
timeout_minutes: 60
usage_policy_name: vision-research
"""


@pytest.fixture
def policy(world: World) -> UsagePolicy:
    """$5,000 a month, $6,254.12 spent (125%), refusing new runs; one spend alert fired."""
    policy = UsagePolicy.objects.create(name="vision-research", budget_usd=Decimal("5000"), action=SpentAction.REFUSE)
    policy.teams.add(world.vision)
    CostDaily.objects.create(
        day=NOW.date(), team=world.vision, experiment_name="llama-ft", creator="alice@example.com",
        usage_policy_name=policy.name, accelerator_type="GPU_8xH100", region="us-west-2",
        compute_usd=Decimal("6254.12"), gpu_hours=Decimal("10"), runs=1,
    )  # fmt: skip
    rollups.summarize_days([NOW.date()])
    BudgetAlert.objects.create(
        policy=policy, period_start=NOW.date().replace(day=1), threshold=100, kind=AlertKind.FORECAST,
        spend_usd=Decimal("6254.12"), forecast_usd=Decimal("12345.60"), budget_usd=policy.budget_usd,
        created_at=NOW, fired_at=NOW,
    )  # fmt: skip
    return policy


def test_the_filter_and_the_function_agree() -> None:
    assert format_usd(Decimal("6254.12")) == "$6,254.12"
    assert format_usd(Decimal("-1234567.005")) == "-$1,234,567.01"


def test_the_alerts_table_prints_money_with_separators(world, policy) -> None:
    with time_machine.travel(NOW, tick=False):
        html = world.client_for(world.alice).get(reverse("policy_detail", args=[policy.pk])).content.decode()
    table = re.search(r"<h2>Alerts fired.*?</table>", html, re.S).group(0)
    assert ">$6,254.12<" in table and ">$12,345.60<" in table
    assert "$6254.12" not in html and "$12345.6" not in html


def test_the_alert_email_text_prints_money_as_the_pages_do(world, policy) -> None:
    notice = alerts.alert_notice(BudgetAlert.objects.get())
    assert "forecast to spend $12,345.60" in notice.text and "of its $5,000.00 budget" in notice.text
    assert "($6,254.12 spent so far)" in notice.text
    # The webhook payload's money stays a plain number: a program reads it.
    assert notice.payload["spend_usd"] == "6254.12" and notice.payload["budget_usd"] == "5000"


def test_an_admission_refusal_prints_money_as_the_pages_do(world, policy) -> None:
    answer = admit_yaml(WORKLOAD, world.vision, region="us-west-2", now=NOW).as_dict()
    [violation] = answer["violations"]
    assert "has spent $6,254.12 of its $5,000.00 budget" in violation["message"]
    assert answer["remaining_budget_usd"] == "-1254.12"


def test_the_admin_money_columns_print_money_as_the_pages_do(world, policy) -> None:
    root = User.objects.create_superuser("root", "root@example.com", "x")
    client = world.client_for(root)
    policies = client.get("/admin/billing/usagepolicy/").content.decode()
    assert ">$5,000.00<" in policies and ">5000.00<" not in policies
    alerts_page = client.get("/admin/billing/budgetalert/").content.decode()
    assert ">$6,254.12<" in alerts_page and ">6254.12<" not in alerts_page


def test_the_burn_down_hover_prints_money_with_separators(world, policy) -> None:
    with time_machine.travel(NOW, tick=False):
        figure = charts.burn_down_figure(budget.evaluate(policy))
    assert figure is not None
    for trace in figure["data"]:
        assert "$%{y:,.2f}" in trace["hovertemplate"], trace["name"]
    assert figure["layout"]["yaxis"]["tickformat"].startswith(",")


def test_advice_prints_money_as_the_pages_do(world: World) -> None:
    run = make_run(world.vision, "low")
    evidence = Evidence(now=NOW, mean_util={run.pk: (20.0, 30)}, run_cost={run.pk: Decimal("12000")})
    finding = low_util_multi_gpu(Run.objects.select_related("team").get(pk=run.pk), evidence)
    assert finding is not None and "about $3,000.00 instead of $12,000.00" in finding.why


# A `$` written straight before a template variable prints the amount as it comes ("$6254.12").
# A unit price ("$0.02/GB", six places) is a rate, not an amount: it is left as priced.
RAW_DOLLAR = re.compile(r"\$\{\{[^}]*\}\}(?!/)")


def test_no_template_puts_a_dollar_sign_before_a_raw_amount() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in sorted(Path(ROOT, "templates").rglob("*.html"))
        for match in RAW_DOLLAR.finditer(path.read_text())
    ]
    assert found == []
