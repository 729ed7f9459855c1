"""The run list: access, team scoping, filters, sorting, pagination and a flat query count."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.http import HttpResponse
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from pytest_django.fixtures import Settings

from runs.choices import AcceleratorType, RunStatus
from runs.models import Run
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


def listed(response: HttpResponse) -> list[str]:
    """External ids of the runs on the page, in order."""
    assert response.status_code == 200
    return [run.external_id for run in response.context["page"].object_list]


@pytest.fixture
def fleet(world: World) -> dict[str, Run]:
    """Runs that differ in one attribute each, for the filters to tell apart."""
    return {
        "base": make_run(world.vision, "vis-base"),
        "failed": make_run(
            world.vision,
            "vis-failed",
            status=RunStatus.FAILED,
            experiment_name="/Workspace/Users/bob/resnet",
            creator="bob@example.com",
            submitted_at=T0 - timedelta(days=3),
            started_at=T0 - timedelta(days=3),
            ended_at=T0 - timedelta(days=3) + timedelta(minutes=5),
        ),
        "a10": make_run(
            world.vision,
            "vis-a10",
            accelerator_type=AcceleratorType.A10_1,
            num_accelerators=1,
            gpus_per_node=1,
            region="us-east-1",
            mlflow_run_id="abc123mlflow",
            submitted_at=T0 + timedelta(days=1),
            started_at=T0 + timedelta(days=1),
            ended_at=T0 + timedelta(days=1, hours=5),
        ),
        "nlp": make_run(world.nlp, "nlp-secret", experiment_name="/Workspace/Users/charlie/bert"),
    }


@pytest.mark.parametrize("name", ["overview", "run_list", "run_detail", "run_log"])
def test_anonymous_is_sent_to_login(world: World, client: Client, name: str) -> None:
    run = make_run(world.vision)
    url = reverse(name, args=[run.pk]) if name in ("run_detail", "run_log") else reverse(name)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_a_member_sees_only_their_teams_runs(world: World, fleet: dict[str, Run]) -> None:
    assert set(listed(world.client_for(world.alice).get(reverse("run_list")))) == {"vis-base", "vis-failed", "vis-a10"}
    charlie_sees = listed(world.client_for(world.charlie).get(reverse("run_list")))
    assert charlie_sees == ["nlp-secret"]
    assert b"vis-base" not in world.client_for(world.charlie).get(reverse("run_list")).content


def test_staff_sees_every_team(world: World, fleet: dict[str, Run]) -> None:
    assert len(listed(world.client_for(world.sam).get(reverse("run_list")))) == 4


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"status": "failed"}, {"vis-failed"}),
        ({"creator": "bob@"}, {"vis-failed"}),
        ({"accelerator": AcceleratorType.A10_1}, {"vis-a10"}),
        ({"region": "us-east-1"}, {"vis-a10"}),
        ({"experiment": "RESNET"}, {"vis-failed"}),
        ({"q": "abc123"}, {"vis-a10"}),  # MLflow run id
        ({"q": "vis-ba"}, {"vis-base"}),  # external id
        ({"q": "bob@example"}, {"vis-failed"}),  # creator
        ({"submitted_from": "2026-11-02"}, {"vis-base", "vis-a10"}),
        ({"submitted_to": "2026-11-02"}, {"vis-base", "vis-failed"}),
        ({"submitted_from": "2026-11-02", "submitted_to": "2026-11-02"}, {"vis-base"}),
        ({"status": "succeeded", "region": "us-west-2"}, {"vis-base"}),
    ],
)
def test_each_filter_narrows(world: World, fleet: dict[str, Run], params: dict, expected: set[str]) -> None:
    assert set(listed(world.client_for(world.alice).get(reverse("run_list"), params))) == expected


def test_team_filter(world: World, fleet: dict[str, Run]) -> None:
    sam = world.client_for(world.sam)
    assert set(listed(sam.get(reverse("run_list"), {"team": world.nlp.pk}))) == {"nlp-secret"}


def test_another_teams_id_is_a_form_error_not_a_leak(world: World, fleet: dict[str, Run]) -> None:
    response = world.client_for(world.alice).get(reverse("run_list"), {"team": world.nlp.pk})
    assert "nlp-secret" not in listed(response)
    assert response.context["form"].errors["team"]


@pytest.mark.parametrize(
    "params",
    [
        {"status": "exploded"},
        {"submitted_from": "yesterday-ish"},
        {"team": "not-a-number"},
        {"accelerator": "GPU_9000xTPU"},
        {"q": "x" * 500},
        {"submitted_from": "2026-11-05", "submitted_to": "2026-11-01"},
    ],
)
def test_invalid_filter_values_show_an_error_never_a_500(world: World, fleet: dict[str, Run], params: dict) -> None:
    response = world.client_for(world.alice).get(reverse("run_list"), {**params, "region": "us-east-1"})
    assert response.status_code == 200
    assert b"Some filters were not applied" in response.content
    # The valid filter next to the broken one still applies.
    assert listed(response) == ["vis-a10"]


def test_sorting(world: World, fleet: dict[str, Run]) -> None:
    alice = world.client_for(world.alice)
    url = reverse("run_list")
    assert listed(alice.get(url)) == ["vis-a10", "vis-base", "vis-failed"]  # newest submitted first
    assert listed(alice.get(url, {"sort": "submitted"})) == ["vis-failed", "vis-base", "vis-a10"]
    assert listed(alice.get(url, {"sort": "-duration"})) == ["vis-a10", "vis-base", "vis-failed"]
    assert listed(alice.get(url, {"sort": "duration"})) == ["vis-failed", "vis-base", "vis-a10"]
    assert listed(alice.get(url, {"sort": "status"}))[0] == "vis-failed"  # "failed" < "succeeded"
    assert listed(alice.get(url, {"sort": "-status"}))[-1] == "vis-failed"
    assert listed(alice.get(url, {"sort": "experiment"}))[-1] == "vis-failed"  # /Users/alice < /Users/bob
    assert listed(alice.get(url, {"sort": "-experiment"}))[0] == "vis-failed"
    assert listed(alice.get(url, {"sort": "accelerator"}))[0] == "vis-a10"  # GPU_1xA10 < GPU_8xH100


def test_unknown_sort_key_is_ignored(world: World, fleet: dict[str, Run]) -> None:
    alice = world.client_for(world.alice)
    for bad in ("password", "-team__name", "id; drop table"):
        response = alice.get(reverse("run_list"), {"sort": bad})
        assert listed(response) == ["vis-a10", "vis-base", "vis-failed"]
        assert response.context["sort"] == "-submitted"


def test_sort_links_reverse_on_second_click_and_keep_filters(world: World, fleet: dict[str, Run]) -> None:
    response = world.client_for(world.alice).get(reverse("run_list"), {"sort": "experiment", "region": "us-west-2"})
    html = response.content.decode()
    assert "?sort=-experiment&amp;region=us-west-2" in html or "?region=us-west-2&amp;sort=-experiment" in html


def test_pagination_keeps_filters_and_tolerates_bad_page_numbers(world: World, settings: Settings) -> None:
    settings.AIRBOARD_RUNS_PER_PAGE = 2
    for i in range(5):
        make_run(world.vision, f"run-{i}", submitted_at=T0 + timedelta(minutes=i))
    alice = world.client_for(world.alice)
    url = reverse("run_list")

    first = alice.get(url, {"status": "succeeded"})
    assert listed(first) == ["run-4", "run-3"]
    assert 'href="?status=succeeded&amp;page=2"' in first.content.decode()
    assert listed(alice.get(url, {"status": "succeeded", "page": 2})) == ["run-2", "run-1"]
    assert listed(alice.get(url, {"page": 999})) == ["run-0"]  # past the end: the last page
    assert listed(alice.get(url, {"page": "abc"})) == ["run-4", "run-3"]  # not a number: the first
    assert listed(alice.get(url, {"page": -1})) == ["run-0"]


def test_query_count_does_not_grow_with_the_page(world: World, settings: Settings) -> None:
    settings.AIRBOARD_RUNS_PER_PAGE = 100
    alice = world.client_for(world.alice)

    def queries_for(count: int) -> int:
        Run.objects.all().delete()
        for i in range(count):
            # Half show their creator through the user FK, which select_related must cover.
            make_run(world.vision, f"run-{i}", user=world.bob if i % 2 else None, creator="" if i % 2 else "x@y")
        with CaptureQueriesContext(connection) as ctx:
            assert len(listed(alice.get(reverse("run_list")))) == count
        return len(ctx.captured_queries)

    few, many = queries_for(5), queries_for(50)
    assert many == few
    # Session, user, the user's teams (form and scoping), count, page; then the glance column
    # (runs.glance): two telemetry queries, the cost engine's constant set for the page, and the
    # under-use flags (runs.telemetry.underuse: one query a rollup tier with runs to judge).
    assert few <= 20


def test_empty_states(world: World, fleet: dict[str, Run]) -> None:
    alice = world.client_for(world.alice)
    assert b"No runs match these filters" in alice.get(reverse("run_list"), {"q": "nothing-like-this"}).content
    nobody = world.client_for(world.charlie)
    Run.objects.filter(team=world.nlp).delete()
    assert b"No runs yet" in nobody.get(reverse("run_list")).content


def test_rows_link_to_the_run_page_and_flag_cross_region(world: World) -> None:
    run = make_run(world.vision, "far-away", region="us-east-1", home_region="us-west-2")
    html = world.client_for(world.alice).get(reverse("run_list")).content.decode()
    assert f'href="{reverse("run_detail", args=[run.pk])}"' in html
    assert re.search(r"us-east-1\s*<span class=\"badge badge-warn\"[^>]*>cross-region</span>", html)


@time_machine.travel(T0 + timedelta(hours=3), tick=False)
def test_duration_sort_counts_running_runs_up_to_now(world: World) -> None:
    make_run(world.vision, "short")  # one hour, finished
    make_run(world.vision, "still-going", status=RunStatus.RUNNING, ended_at=None)  # three hours so far
    make_run(world.vision, "not-started", status=RunStatus.QUEUED, started_at=None, ended_at=None)
    alice = world.client_for(world.alice)
    assert listed(alice.get(reverse("run_list"), {"sort": "-duration"})) == ["still-going", "short", "not-started"]
    assert listed(alice.get(reverse("run_list"), {"sort": "duration"})) == ["short", "still-going", "not-started"]
