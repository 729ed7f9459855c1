"""The lower findings of issue 33, each as it was reproduced on 4ab1749."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import Client

from dashboard.kit import outbound
from dashboard.kit.redaction import redact
from runs.models import MetricPoint
from tests.conftest import PASSWORD, T0, World, make_run

pytestmark = pytest.mark.django_db


# --- redaction ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key=***"),
        ("AWS_SECRET_ACCESS_KEY: wJalrXUtnFEMI/K7MDENG", "AWS_SECRET_ACCESS_KEY: ***"),
        ("InvalidClientTokenId: AKIAIOSFODNN7EXAMPLE is not valid", "InvalidClientTokenId: *** is not valid"),
        ("curl --user alice:s3cret https://host/x", "curl --user alice:*** https://host/x"),
        ("curl -u alice:s3cret https://host/x", "curl -u alice:*** https://host/x"),
        ("401 for eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl-_x ok", "401 for *** ok"),
    ],
)
def test_the_redactor_knows_more_credential_shapes(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_the_redactor_leaves_ordinary_text() -> None:
    for text in ("primary_key=5", "re-u: ab:c", "eyJ alone", "see ASIAN markets"):
        assert redact(text) == text


# --- the admin login's per-address limit ---------------------------------------------------------------


def test_spraying_the_admin_login_is_limited_per_address(world: World, settings) -> None:
    cache.clear()
    settings.AIRBOARD_LOGIN_FAILURES_PER_IP = 3

    def admin_login(username: str, password: str):
        return Client().post("/admin/login/", {"username": username, "password": password, "next": "/admin/"},
                             REMOTE_ADDR="198.51.100.7")  # fmt: skip

    assert [admin_login(f"user{i}", "wrong").status_code for i in range(3)] == [200, 200, 200]
    blocked = admin_login("sam", PASSWORD)
    assert blocked.status_code == 429 and blocked["Retry-After"]
    # One counter for both forms: the site's login is closed to that address too.
    site = Client().post("/login/", {"username": "sam", "password": PASSWORD}, REMOTE_ADDR="198.51.100.7")
    assert site.status_code == 429
    cache.clear()


# --- webhook destinations --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254, the metadata service
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "64:ff9b:1::a00:5",  # RFC 8215 local-use NAT64
        "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "::127.0.0.1",  # IPv4-compatible
        "::169.254.169.254",
    ],
)
def test_ipv6_forms_of_private_addresses_are_refused(address: str) -> None:
    assert not outbound.is_public(address)
    assert "private, loopback" in outbound.destination_problem(f"http://[{address}]/hook")


def test_ipv6_forms_of_public_addresses_are_allowed() -> None:
    assert outbound.is_public("64:ff9b::808:808") and outbound.is_public("2002:808:808::1")
    assert outbound.is_public("2606:4700:4700::1111")


# --- Plotly legends --------------------------------------------------------------------------------------


def test_html_in_a_metric_name_is_text_in_the_legend(world: World) -> None:
    evil = '<a href="https://evil.example/">click</a>'
    runs = [make_run(world.vision, f"r{i}") for i in range(2)]
    for run in runs:
        MetricPoint.objects.create(run=run, key=evil, step=1, ts=T0 + timedelta(minutes=1), value=1.0)
    page = world.client_for(world.alice).get("/runs/compare/", {"run": [r.pk for r in runs]}).content.decode()
    figures = [json.loads(m) for m in re.findall(r'<script id="[^"]+" type="application/json">(.*?)</script>', page)]
    metrics = next(f for f in figures if any(t.get("yaxis") == "y" and t.get("x") for t in f["data"]))
    strings = json.dumps(metrics)
    assert "<a href" not in strings
    assert "&lt;a href=" in strings and "&gt;click&lt;/a&gt;" in strings
    assert metrics["layout"]["yaxis"]["title"]["text"].startswith("&lt;a href=")
    assert all("&lt;a" in t["hovertemplate"] and "<extra>" in t["hovertemplate"] for t in metrics["data"])


# --- odd ids in query strings ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["²", "9" * 19, str(2**63), "9" * 5000, "0", "-1", "1e3"])
def test_odd_run_ids_in_compare_are_a_400(world: World, value: str) -> None:
    run = make_run(world.vision)
    response = world.client_for(world.alice).get("/runs/compare/", {"run": [run.pk, value]})
    assert response.status_code == 400 and "is not a run id" in response.content.decode()


@pytest.mark.parametrize("value", ["²", str(2**63), "9" * 5000])
def test_odd_gpu_nodes_are_ignored_or_a_400(world: World, value: str) -> None:
    run = make_run(world.vision)
    client = world.client_for(world.alice)
    page = client.get(f"/runs/{run.pk}/", {"gpu_node": value})
    assert page.status_code == 200 and "showing all nodes" in page.content.decode()
    chart = client.get(f"/runs/{run.pk}/telemetry.json", {"gpu_node": value})
    assert chart.status_code == 400 and "gpu_node must be" in chart.json()["error"]
