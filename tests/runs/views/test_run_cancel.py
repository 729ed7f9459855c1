"""The run page's Cancel button: POST only, team-scoped, active runs only, one request recorded."""

from __future__ import annotations

from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from runs import cancel
from runs.choices import RunEventKind, RunStatus
from runs.models import Run, RunEvent
from tests.conftest import make_run


def cancel_url(run: Run) -> str:
    return reverse("run_cancel", args=[run.pk])


def running(world) -> Run:
    return make_run(world.vision, "run-live", status=RunStatus.RUNNING, ended_at=None)


def test_member_cancels_an_active_run(world) -> None:
    run = running(world)
    client = world.client_for(world.bob)

    response = client.post(cancel_url(run), follow=True)

    assert response.redirect_chain == [(reverse("run_detail", args=[run.pk]), 302)]
    run.refresh_from_db()
    assert run.cancel_requested_at is not None
    # The request only asks: the launcher sets the final status when the command has stopped.
    assert run.status == RunStatus.RUNNING
    event = RunEvent.objects.get(run=run)
    # The one cancel path (runs/cancel.py) records who asked and what it did: this collector run
    # has no cancel command or webhook configured here, which the event and the message say.
    assert (event.kind, event.details) == (
        RunEventKind.CANCEL_REQUESTED,
        {"user": "bob", "method": "", "outcome": "skipped"},
    )
    assert "Cancel requested" in next(str(m) for m in get_messages(response.wsgi_request))
    assert "waiting for the launcher" in response.content.decode()


def test_a_second_request_changes_nothing(world) -> None:
    run = running(world)
    client = world.client_for(world.alice)
    client.post(cancel_url(run))
    first = Run.objects.get(pk=run.pk).cancel_requested_at

    response = client.post(cancel_url(run), follow=True)

    assert Run.objects.get(pk=run.pk).cancel_requested_at == first
    assert RunEvent.objects.filter(run=run).count() == 1
    assert "already requested" in response.content.decode()


def test_active_run_page_shows_the_button_and_a_finished_one_does_not(world) -> None:
    client = world.client_for(world.alice)
    live = running(world)
    done = make_run(world.vision, "run-done")

    live_page = client.get(reverse("run_detail", args=[live.pk])).content.decode()
    done_page = client.get(reverse("run_detail", args=[done.pk])).content.decode()

    assert f'action="{cancel_url(live)}"' in live_page
    assert "csrfmiddlewaretoken" in live_page
    assert cancel_url(done) not in done_page


def test_finished_run_is_left_alone(world) -> None:
    run = make_run(world.vision)  # succeeded

    response = world.client_for(world.alice).post(cancel_url(run), follow=True)

    run.refresh_from_db()
    assert run.cancel_requested_at is None
    assert not RunEvent.objects.exists()
    assert "already succeeded; nothing to cancel" in response.content.decode()


def test_get_is_not_allowed(world) -> None:
    run = running(world)
    assert world.client_for(world.alice).get(cancel_url(run)).status_code == 405
    run.refresh_from_db()
    assert run.cancel_requested_at is None


def test_another_team_gets_404(world) -> None:
    run = running(world)
    assert world.client_for(world.charlie).post(cancel_url(run)).status_code == 404
    run.refresh_from_db()
    assert run.cancel_requested_at is None


def test_staff_may_cancel_any_team_run(world) -> None:
    run = running(world)
    world.client_for(world.sam).post(cancel_url(run))
    run.refresh_from_db()
    assert run.cancel_requested_at is not None


def test_anonymous_is_sent_to_login(client, world) -> None:
    run = running(world)
    response = client.post(cancel_url(run))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    run.refresh_from_db()
    assert run.cancel_requested_at is None


def test_csrf_is_enforced(world) -> None:
    run = running(world)
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.alice)
    assert client.post(cancel_url(run)).status_code == 403
    run.refresh_from_db()
    assert run.cancel_requested_at is None


def test_a_cancel_command_that_does_not_parse_fails_the_cancel_not_the_page(world, settings) -> None:
    # An unclosed quote in the operator's template: shlex cannot split it.
    settings.AIRBOARD_CANCEL_COMMAND = "databricks jobs cancel-run '{run_id}"
    run = running(world)

    response = world.client_for(world.bob).post(cancel_url(run), follow=True)

    assert response.status_code == 200
    event = RunEvent.objects.get(run=run)
    assert event.details["outcome"] == "failed" and event.details["method"] == "command"
    assert "the cancel command failed" in next(str(m) for m in get_messages(response.wsgi_request))


def test_the_cancel_command_output_is_kept_redacted(world, settings) -> None:
    # A CLI that echoes its credential on failure (as a misconfigured profile may).
    settings.AIRBOARD_CANCEL_COMMAND = (
        "python3 -c \"import sys; print('Error: token=dapi0123456789abcdef0123456789abcdef'); sys.exit(1)\" {run_id}"
    )
    run = running(world)

    done = cancel.request_cancel(run, reason="test", now=run.started_at)

    assert done.outcome == "failed" and "exit status 1" in done.output
    assert "dapi0123456789abcdef" not in done.output and "***" in done.output
