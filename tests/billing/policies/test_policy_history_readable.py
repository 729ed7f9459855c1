"""A policy's history reads as a diff people can follow: settings by label, values formatted.

Issue 35 found the history page printing field names and Python reprs (`budget_usd`,
`teams ['vision']`, `None`). Each row now names the setting as the form does and shows its
values as the policy page does: money as "$6,254.12", lists joined, empty values in words.
"""

from __future__ import annotations

import re
from decimal import Decimal
from html import unescape

import pytest
from django.urls import reverse

from billing.models import UsagePolicy
from billing.policies import versions
from tests.conftest import World

EDIT = {
    "name": "vision-research", "description": "", "budget_usd": "6254.12", "period": "quarter",
    "period_start_day": "1", "alert_thresholds": "50, 90", "forecast_thresholds": "100", "action": "refuse",
    "allowed_accelerator_types": ["GPU_8xH100", "GPU_1xA10"], "max_num_accelerators": "16",
    "max_timeout_minutes": "90", "max_retries": "", "allowed_regions": "us-west-2, us-east-1",
    "idle_gpu_percent": "12.5", "idle_warn_minutes": "30", "idle_cancel_minutes": "",
}  # fmt: skip


@pytest.fixture
def edited(world: World) -> UsagePolicy:
    policy = UsagePolicy.objects.create(name="vision-research", budget_usd=Decimal("1000"))
    policy.teams.add(world.vision)
    versions.record_version(policy, world.sam, note="created")
    # cross-region left unticked: allowed before, forbidden after.
    response = world.client_for(world.sam).post(
        reverse("policy_edit", args=[policy.pk]), {**EDIT, "teams": [world.vision.pk, world.nlp.pk]}
    )
    assert response.status_code == 302
    return policy


def text_of(html: str) -> str:
    """What a reader sees: the page without its tags, attributes, scripts and styles."""
    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def rows(html: str, version: int) -> dict[str, list[str]]:
    """{setting label: [cells]} of one version's diff table."""
    section = re.search(rf'<section[^>]*id="v{version}".*?</section>', html, re.S).group(0)
    out = {}
    for row in re.findall(r"<tr data-field[^>]*>(.*?)</tr>", section, re.S):
        cells = [text_of(cell).strip() for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
        out[cells[0]] = cells[1:]
    return out


def test_a_versions_changes_are_labelled_and_formatted(world, edited) -> None:
    html = world.client_for(world.alice).get(reverse("policy_versions", args=[edited.pk])).content.decode()
    changed = rows(html, 2)
    assert changed["Budget (USD)"] == ["$1,000.00", "$6,254.12"]
    assert changed["Teams"] == ["vision", "nlp, vision"]
    assert changed["Budget period"] == ["Month", "Quarter"]
    assert changed["Spend alerts (% of budget)"] == ["50%, 80%, 100%", "50%, 90%"]
    assert changed["When the budget is spent"] == ["Notify only", "Refuse new runs"]
    assert changed["Allowed accelerator types"] == ["any type", "8x H100 (80 GB each), 1x A10 (24 GB)"]
    assert changed["Most accelerators a run may use"] == ["no limit", "16"]
    assert changed["Longest timeout a run may set (minutes)"] == ["no limit", "90 minutes"]
    assert changed["Allowed regions"] == ["any region", "us-east-1, us-west-2"]
    assert changed["Allow GPUs from another region"] == ["allowed", "forbidden"]
    assert changed["GPUs count as idle below (% utilization)"] == ["no idle-GPU rule", "12.5%"]
    assert changed["Warn after idle for (minutes)"] == ["never", "30 minutes"]
    # Unchanged settings are not listed.
    assert "Name" not in changed and "Most retries a run may set" not in changed


def test_the_history_shows_no_field_names_or_python_values(world, edited) -> None:
    text = text_of(world.client_for(world.alice).get(reverse("policy_versions", args=[edited.pk])).content.decode())
    for raw in ("budget_usd", "teams", "['vision']", "None", "True", "False", "max_num_accelerators", "[50"):
        assert raw not in text, raw
    assert "1000.00" not in text and "6254.12" not in text


def test_the_first_version_lists_what_each_setting_was_set_to(world, edited) -> None:
    html = world.client_for(world.alice).get(reverse("policy_versions", args=[edited.pk])).content.decode()
    created = rows(html, 1)
    assert created["Name"] == ["vision-research"] and created["Budget (USD)"] == ["$1,000.00"]
    assert created["Teams"] == ["vision"] and created["Description"] == ["none"]
    assert created["Allowed regions"] == ["any region"] and created["Allow GPUs from another region"] == ["allowed"]


def test_a_policy_covering_every_team_says_so(world: World) -> None:
    policy = UsagePolicy.objects.create(name="everyone", budget_usd=Decimal("5"))
    first = versions.record_version(policy, world.sam, note="created")
    assert {c.field: c.new for c in versions.readable(first.diff, first=True)}["teams"] == "every team"


def test_an_old_snapshot_with_a_value_of_an_unexpected_shape_still_reads(world: World) -> None:
    """Stored JSON outlives the code: a value the formatter does not expect shows as text, never a 500."""
    changes = versions.readable([
        {"field": "budget_usd", "old": "not money", "new": 12},
        {"field": "action", "old": "retired-action", "new": "notify"},
        {"field": "gone_field", "old": 1, "new": 2},
    ])  # fmt: skip
    assert [(c.label, c.old, c.new) for c in changes] == [
        ("Budget (USD)", "not money", "$12.00"), ("When the budget is spent", "retired-action", "Notify only"),
        ("gone_field", "1", "2"),
    ]  # fmt: skip
