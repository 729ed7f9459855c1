"""The policy form names each setting in words, as the admin and the history page do.

Issue 35 found labels made from field names ("Budget usd", "Max num accelerators"). Each label
is now the model field's verbose name (`billing.policies.versions.setting_label`), so the form,
the admin's form and the history's diff say the same thing.
"""

from __future__ import annotations

from html import unescape

import pytest
from django.contrib.auth.models import User
from django.forms.utils import pretty_name
from django.urls import reverse

from billing.policies.forms import PolicyForm
from billing.policies.versions import setting_label
from tests.conftest import World

# Fields whose name already reads as words: their label may be the field name's.
PLAIN = {"name", "description", "teams", "databricks_policy_id", "allowed_accelerator_types", "allowed_regions"}


def test_no_label_is_a_field_name_spelled_out() -> None:
    form = PolicyForm()
    for name, field in form.fields.items():
        assert "_" not in field.label and " usd" not in field.label.lower() and " num " not in field.label.lower()
        if name not in PLAIN:
            assert field.label != pretty_name(name), name
        assert field.label == setting_label(name), name


@pytest.mark.django_db
def test_the_new_policy_page_reads_in_words(world: World) -> None:
    html = unescape(world.client_for(world.sam).get(reverse("policy_new")).content.decode())
    for label in ("Budget (USD)", "Most accelerators a run may use", "Longest timeout a run may set (minutes)",
                  "Spend alerts (% of budget)", "When the budget is spent", "Allow GPUs from another region",
                  "Allowed accelerator types", "Allowed regions"):  # fmt: skip
        assert f"<span>{label}</span>" in html, label
    for raw in ("Budget usd", "Max num accelerators", "Max timeout minutes", "Alert thresholds", "Idle gpu percent"):
        assert raw not in html, raw


@pytest.mark.django_db
def test_the_admins_policy_form_uses_the_same_labels(world: World) -> None:
    root = User.objects.create_superuser("root", "root@example.com", "x")
    html = unescape(world.client_for(root).get("/admin/billing/usagepolicy/add/").content.decode())
    assert "Budget (USD):" in html and "Most accelerators a run may use:" in html
    assert "Budget usd" not in html and "Max num accelerators" not in html


@pytest.mark.django_db
def test_the_admin_index_says_usage_policies(world: World) -> None:
    root = User.objects.create_superuser("root", "root@example.com", "x")
    html = world.client_for(root).get("/admin/").content.decode()
    assert ">Usage policies</a>" in html and "policys" not in html.lower()
