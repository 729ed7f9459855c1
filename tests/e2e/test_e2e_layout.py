"""Layout in a real Chromium: forms, money labels and tables stay inside their cards.

Each check measures boxes (getBoundingClientRect) at the README screenshots' width (1400 px)
and at 1280 px, so a defect a new user would see in the screenshots (a squeezed filter form, a
label running past its card, a table cut off at the card's edge) fails here first.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.costs import rollups
from billing.models import CostDaily
from tests.e2e.conftest import Browsing, Scene

pytestmark = pytest.mark.django_db(transaction=True)

WIDTHS = (1400, 1280)

# Boxes of `selector`'s matches that stick out of their closest `container` (more than half a px).
OUTSIDE = """([selector, container]) => [...document.querySelectorAll(selector)].flatMap((el) => {
  const box = el.getBoundingClientRect(), outer = el.closest(container).getBoundingClientRect();
  const out = box.left < outer.left - 0.5 || box.right > outer.right + 0.5 || box.top < outer.top - 0.5
    || box.bottom > outer.bottom + 0.5;
  return out ? [`${el.tagName}.${el.className} "${el.textContent.trim().slice(0, 40)}"`] : [];
})"""

# Table wrappers in `scope` whose table is wider than they are (a horizontal scrollbar, cut-off columns).
SCROLLING = """(scope) => [...document.querySelectorAll(`${scope} .table-wrap`)]
  .filter((w) => w.scrollWidth > w.clientWidth + 1).map((w) => `${w.scrollWidth} > ${w.clientWidth}`)"""


def _outside(browsing: Browsing, selector: str, container: str) -> list[str]:
    return browsing.page.evaluate(OUTSIDE, [selector, container])


def test_run_list_filter_form_lays_out_in_rows(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    browsing.login_as(scene.world.alice)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 1000})
        browsing.goto("/runs/")
        assert _outside(browsing, "form.filters .field, form.filters .filter-actions", "form.filters") == []
        # The fields share rows across the form's width (not one narrow column of them)...
        form = page.locator("form.filters").bounding_box()
        grid = page.locator("form.filters .filter-grid").bounding_box()
        assert grid["width"] > 0.9 * (form["width"] - 40), (width, grid, form)
        tops = [round(box["y"]) for box in (f.bounding_box() for f in page.locator("form.filters .field").all())]
        assert tops.count(tops[0]) >= 5, (width, tops)
        # ... and the buttons keep their own size, side by side.
        filter_box = page.locator(".filter-actions .button", has_text="Filter").bounding_box()
        clear_box = page.locator(".filter-actions .button", has_text="Clear").bounding_box()
        assert filter_box["width"] < 200 and round(filter_box["y"]) == round(clear_box["y"]), (filter_box, clear_box)
        browsing.screenshot(f"runs-filters-{width}")


def test_a_lower_bound_label_stays_inside_its_card(browsing: Browsing, scene: Scene) -> None:
    """A policy's spend with unpriced usage: the 'lower bound: ...' badge wraps inside the card."""
    today = timezone.now().date()
    CostDaily.objects.create(
        day=today, team=scene.world.vision, experiment_name=scene.running.experiment_name, creator="alice@example.com",
        usage_policy_name=scene.policy.name, accelerator_type="", region="us-west-2", compute_usd=Decimal("0"),
        gpu_hours=Decimal("2.0"), runs=1,
        unpriced="no accelerator type recorded for this run\nno instance price for 1 x g5.2xlarge in us-west-2",
    )  # fmt: skip
    rollups.summarize_days([today, today - timedelta(days=1)])
    page = browsing.page
    browsing.login_as(scene.world.alice)
    for width in (*WIDTHS, 700):
        page.set_viewport_size({"width": width, "height": 1000})
        browsing.goto(f"/costs/policies/{scene.policy.pk}/")
        badge = page.locator(".policy-spend .figure-kind.badge")
        assert "lower bound: no accelerator type recorded for this run" in badge.inner_text()
        assert _outside(browsing, ".figure-kind", ".card") == []
        browsing.goto("/costs/")
        assert page.locator(".figure-kind.badge").count() >= 1
        assert _outside(browsing, ".figure-kind", ".card") == []
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    browsing.screenshot("policy-lower-bound")


def test_flush_cards_keep_their_heading_off_the_edge(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    browsing.login_as(scene.world.alice)
    browsing.goto(f"/costs/policies/{scene.policy.pk}/")
    for section in ("#spend-by-user", "#spend-by-experiment", "#spend-by-run"):
        card = page.locator(section).bounding_box()
        # Where the heading's text starts: its first line's box, whatever padding or margin put it there.
        text = page.locator(f"{section} > h2").evaluate(
            "(h) => { const r = document.createRange(); r.selectNodeContents(h); const b = r.getClientRects()[0];"
            " return {x: b.left, y: b.top}; }"
        )
        assert text["x"] >= card["x"] + 12 and text["y"] >= card["y"] + 12, (section, card, text)
    # Two rows of cards are apart, not touching.
    period = page.locator("section.card", has_text="This period").first.bounding_box()
    split = page.locator("#spend-by-user").bounding_box()
    assert split["y"] >= period["y"] + period["height"] + 12


def test_overview_and_cost_tables_fit_their_cards(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    browsing.login_as(scene.world.alice)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 1000})
        browsing.goto("/")
        assert page.locator(".glance-table tbody tr").count() >= 1
        assert page.evaluate(SCROLLING, ".card") == [], width
        browsing.goto("/costs/")
        assert page.evaluate(SCROLLING, "#top-experiments, #top-users") == [], width
        assert _outside(browsing, "form.filters .field, form.filters .filter-actions", "form.filters") == []
        # The run page's cost card, the narrower column, holds its five-column breakdown.
        browsing.goto(f"/runs/{scene.running.pk}/")
        assert page.locator(".cost-breakdown").count() == 1
        assert page.evaluate(SCROLLING, ".grid-run") == [], width
