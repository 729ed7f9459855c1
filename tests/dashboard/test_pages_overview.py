"""The overview page (active runs, recent failures, month-to-date spend) and the login page."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.urls import reverse

from billing.costs import rollups
from billing.models import AcceleratorPrice
from dashboard.demo.constants import demo_password
from dashboard.management.commands.runall import seeds_demo
from runs.choices import RunStatus
from runs.models import Run
from tests.conftest import PASSWORD, T0, World, make_run

pytestmark = pytest.mark.django_db
NOW = T0 + timedelta(hours=2)


@pytest.fixture
def frozen() -> time_machine.Coordinates:
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def runs(world: World, frozen: time_machine.Coordinates) -> dict[str, Run]:
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=T0 - timedelta(days=60), usd_per_hour=3
    )
    live = make_run(world.vision, "vis-live", status=RunStatus.RUNNING, started_at=T0, ended_at=None)
    live.attempts.update(ended_at=None)
    made = {
        "live": live,
        "queued": make_run(world.vision, "vis-queued", status=RunStatus.QUEUED, started_at=None, ended_at=None),
        "failed": make_run(
            world.vision, "vis-boom", status=RunStatus.FAILED, state_message="CUDA error: out of memory"
        ),
        "old_failure": make_run(
            world.vision,
            "vis-old-boom",
            status=RunStatus.FAILED,
            submitted_at=T0 - timedelta(days=20),
            started_at=T0 - timedelta(days=20),
            ended_at=T0 - timedelta(days=20) + timedelta(hours=1),
        ),
        "nlp_live": make_run(world.nlp, "nlp-live", status=RunStatus.RUNNING, ended_at=None),
        "nlp_failed": make_run(world.nlp, "nlp-boom", status=RunStatus.FAILED),
    }
    # The overview reads the rollups (plus accrual since their pass), as `make run` writes them.
    rollups.refresh_changed()
    return made


def test_member_sees_active_runs_failures_and_spend(world: World, runs: dict[str, Run]) -> None:
    response = world.client_for(world.alice).get(reverse("overview"))
    assert response.status_code == 200
    ctx = response.context
    assert {r.external_id for r in ctx["active_runs"]} == {"vis-live", "vis-queued"}
    assert ctx["failure_count"] == 1
    assert [r.external_id for r in ctx["failures"]] == ["vis-boom"]
    html = response.content.decode()
    assert f'href="{reverse("run_detail", args=[runs["failed"].pk])}"' in html
    assert "CUDA error: out of memory" in html
    assert "nlp-live" not in html and "nlp-boom" not in html
    # vision this month: the finished run (1 h) + the failed one (1 h) + the live one (2 h so far),
    # 8 GPUs each at $3 per GPU-hour; the 20-day-old failure ended last month.
    (spend,) = ctx["team_spend"]
    row = spend.month
    assert spend.billed is None  # no usage records imported
    assert row.team_name == "vision"
    assert row.gpu_hours == 8 * 3
    assert row.usd == 8 * 3 * 3
    assert row.figure.kind == "estimated" and "estimated, as of" in html
    assert "$72.00" in html


def test_staff_sees_every_team(world: World, runs: dict[str, Run]) -> None:
    ctx = world.client_for(world.sam).get(reverse("overview")).context
    assert {r.external_id for r in ctx["active_runs"]} == {"vis-live", "vis-queued", "nlp-live"}
    assert ctx["failure_count"] == 2
    assert {row.month.team_name for row in ctx["team_spend"]} == {"vision", "nlp"}


def test_other_team_sees_none_of_it(world: World, runs: dict[str, Run]) -> None:
    html = world.client_for(world.charlie).get(reverse("overview")).content.decode()
    assert "vis-live" not in html and "vis-boom" not in html and "vision" not in html


def test_empty_states_say_what_to_do(world: World, frozen: time_machine.Coordinates) -> None:
    html = world.client_for(world.alice).get(reverse("overview")).content.decode()
    assert "No runs yet" in html and "/api/v1/docs" in html
    assert "Nothing is queued or running" in html
    assert "No failures in the last 7 days" in html


def test_user_without_a_team_is_told_so(world: World) -> None:
    world.alice.groups.clear()
    html = world.client_for(world.alice).get(reverse("overview")).content.decode()
    assert "You are not in any team" in html


def test_nav_links(world: World) -> None:
    html = world.client_for(world.alice).get(reverse("overview")).content.decode()
    assert 'href="/api/v1/docs"' in html
    assert f'href="{reverse("run_list")}"' in html
    assert 'href="/admin/"' not in html
    assert 'method="post" action="/logout/"' in html and "csrfmiddlewaretoken" in html
    assert 'href="/admin/"' in world.client_for(world.sam).get(reverse("overview")).content.decode()


def test_login_shows_the_demo_hint_only_while_demo_data_exists(world: World, client: Client, settings) -> None:
    settings.DATABASE_URL = ""  # the embedded default
    assert demo_password() not in client.get("/login/").content.decode()
    make_run(world.vision, "demo-1", is_demo=True)
    html = client.get("/login/").content.decode()
    assert "Demo login" in html and "alice" in html and demo_password() in html


def test_a_team_deployment_never_shows_a_demo_password(world: World, client: Client, settings) -> None:
    # The reproduction: `make run` against PostgreSQL seeded the demo and its superuser,
    # and the login page printed the password. Now it seeds only with --demo, and even then
    # the page shows nothing.
    settings.DATABASE_URL = "postgres://airboard@db.internal:5432/airboard"
    assert seeds_demo(demo_flag=False, no_seed=False) is False
    assert seeds_demo(demo_flag=True, no_seed=False) is True
    make_run(world.vision, "demo-1", is_demo=True)
    html = client.get("/login/").content.decode()
    assert "Demo login" not in html and demo_password() not in html
    settings.DATABASE_URL = ""
    assert seeds_demo(demo_flag=False, no_seed=False) is True
    assert seeds_demo(demo_flag=False, no_seed=True) is False


def test_the_demo_password_is_random_per_workspace(settings, tmp_path) -> None:
    settings.VAR_DIR = tmp_path / "a"
    settings.VAR_DIR.mkdir()
    first = demo_password()
    assert first == demo_password() and len(first) >= 16 and first != "airboard-demo"
    assert oct((settings.VAR_DIR / "demo_password").stat().st_mode & 0o777) == "0o600"
    settings.VAR_DIR = tmp_path / "b"
    settings.VAR_DIR.mkdir()
    assert demo_password() != first


def test_logging_in_with_a_password_reaches_the_overview(world: World, client: Client) -> None:
    response = client.post("/login/", {"username": "alice", "password": PASSWORD}, follow=True)
    assert response.status_code == 200
    assert response.request["PATH_INFO"] == "/"


def test_login_page_renders_for_anonymous(client: Client) -> None:
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert b"Log in to Airboard" in response.content
