"""The demo workspace has a cluster or run that triggers every advice rule, and resets cleanly."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from dashboard.demo.clusters import TRIGGERS
from dashboard.demo.write import seed_demo
from runs.clusters.advice import RULE_IDS
from runs.models import Cluster


@pytest.mark.django_db
def test_demo_triggers_every_rule_and_resets() -> None:
    seed_demo(runs=20, log=lambda _: None)
    assert Cluster.objects.filter(is_demo=True).count() == 5
    out = StringIO()
    call_command("advise", "--json", stdout=out)
    found = {(f["rule"], f["subject"]) for f in json.loads(out.getvalue())}
    assert set(TRIGGERS) == set(RULE_IDS)
    missing = [(rule, subject) for rule, subject in TRIGGERS.items() if (rule, subject) not in found]
    assert not missing, f"demo objects that no longer trigger their rule: {missing}"

    # A reset removes the clusters before the teams they protect, then writes them again.
    seed_demo(runs=20, reset=True, log=lambda _: None)
    assert Cluster.objects.filter(is_demo=True).count() == 5


@pytest.mark.django_db
def test_demo_cluster_pages_render() -> None:
    seed_demo(runs=20, log=lambda _: None)
    client = Client()
    client.force_login(User.objects.get(username="admin"))
    clusters = client.get("/runs/clusters/").content.decode()
    assert "vision-h100-dedicated" in clusters and "no serverless equivalent" in clusters
    for pk in Cluster.objects.filter(is_demo=True).values_list("pk", flat=True):
        assert client.get(f"/runs/clusters/{pk}/").status_code == 200
    advice = client.get("/runs/advice/").content.decode()
    assert all(rule in advice for rule in RULE_IDS)
