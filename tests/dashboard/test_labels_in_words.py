"""Labels people read: regions by their ids, the admin's plurals, advice headings, the Sankey's colours."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group
from django.template import Context, Template
from django.utils import timezone

from billing.costs.charts import SANKEY_LINK, egress_sankey_figure
from billing.costs.forms import CostFilterForm
from billing.models import Delivery
from runs.choices import Region
from runs.clusters.advice import RULE_IDS, RULE_TITLES


@pytest.mark.django_db
def test_regions_are_labelled_by_their_ids() -> None:
    assert [label for _, label in Region.choices] == Region.values
    assert "Us West 2" not in str(CostFilterForm(teams=Group.objects.none()).fields["region"].choices)


def test_the_admin_says_deliveries() -> None:
    assert Delivery._meta.verbose_name_plural == "deliveries"
    assert Delivery in admin.site._registry


def test_every_advice_rule_has_a_heading_for_people() -> None:
    assert set(RULE_TITLES) == set(RULE_IDS)
    assert all(title != rule and "_" not in title.split("(")[0] for rule, title in RULE_TITLES.items())


def test_sankey_links_carry_their_own_colour() -> None:
    flows = [{"source_region": "us-west-2", "destination_region": "us-east-1", "bytes": 10**10, "usd": 1}]
    figure = egress_sankey_figure(flows)
    assert figure["data"][0]["link"]["color"] == [SANKEY_LINK]
    # Half opaque: visible on white and on the dark theme's #161b22 alike.
    assert 0.3 <= float(SANKEY_LINK.rsplit(",", 1)[1].rstrip(") ")) <= 0.7


def test_a_time_followed_by_punctuation_has_no_stray_space() -> None:
    """_time.html ends at its last tag: the run page's coverage line read '18:15 , of a run'."""
    html = Template('{% include "_time.html" with value=now %}, of a run').render(Context({"now": timezone.now()}))
    assert "</time>, of a run" in html
    assert Template('{% include "_time.html" with value=None %}.').render(Context()).endswith("</span>.")
