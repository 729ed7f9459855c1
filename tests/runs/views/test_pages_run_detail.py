"""The run page and its log endpoint: scoping, facts, cost, logs, charts and static assets."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings

from billing.models import AcceleratorPrice
from runs.choices import RunStatus
from runs.models import Attempt, GpuSample, LogChunk, MetricPoint, Node, Run
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db

# A <script> tag without a src attribute, i.e. inline JavaScript (json_script's data blocks,
# type="application/json", are data and allowed).
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.IGNORECASE)
REMOTE_SCRIPT = re.compile(r"<script[^>]*\bsrc=\"(https?:)?//", re.IGNORECASE)


def node_of(run: Run, attempt: int = 1, index: int = 0) -> Node:
    return Node.objects.get(attempt__run=run, attempt__number=attempt, index=index)


def page(client: Client, run: Run, **params: object) -> str:
    """The run page as a reader sees it: the frame, with the log viewer logs.js fetches into it."""
    response = client.get(reverse("run_detail", args=[run.pk]), params)
    assert response.status_code == 200
    log = client.get(reverse("run_log_view", args=[run.pk]), {k: v for k, v in params.items() if k != "range"})
    assert log.status_code == 200
    return response.content.decode() + log.content.decode()


def write_log(node: Node, text: str, pieces: int = 3) -> None:
    """Store `text` as `pieces` chunks cut at arbitrary points (not at line ends)."""
    size = max(len(text) // pieces + 1, 1)
    for seq, start in enumerate(range(0, len(text), size)):
        piece = text[start : start + size]
        LogChunk.objects.create(node=node, seq=seq, text=piece, line_count=piece.count("\n"))


@pytest.fixture
def run(world: World) -> Run:
    return make_run(
        world.vision,
        "vis-llama-7",
        region="us-east-1",
        home_region="us-west-2",
        mlflow_run_id="f00dfeed",
        mlflow_url="https://mlflow.example.com/#/runs/f00dfeed",
        run_page_url="https://workspace.example.com/runs/7",
        timeout_minutes=240,
        max_retries=2,
        usage_policy_name="vision-research",
        parameters={"lr": 0.0003, "epochs": 3},
        workload_yaml="experiment_name: /Workspace/x\ncommand: echo '<script>alert(1)</script>'\n",
        state_message="",
    )


def test_member_sees_the_run_and_its_facts(world: World, run: Run) -> None:
    html = page(world.client_for(world.alice), run)
    assert "vis-llama-7" in html
    assert "cross-region" in html and "us-west-2" in html
    assert 'href="https://mlflow.example.com/#/runs/f00dfeed"' in html
    assert 'href="https://workspace.example.com/runs/7"' in html
    assert "240 min" in html
    assert "vision-research" in html
    assert "0.0003" in html and "epochs" in html


def test_other_team_gets_404_and_staff_sees_it(world: World, run: Run) -> None:
    assert world.client_for(world.charlie).get(reverse("run_detail", args=[run.pk])).status_code == 404
    assert world.client_for(world.charlie).get(reverse("run_log", args=[run.pk])).status_code == 404
    assert world.client_for(world.sam).get(reverse("run_detail", args=[run.pk])).status_code == 200
    assert world.client_for(world.alice).get(reverse("run_detail", args=[run.pk + 1000])).status_code == 404


def test_workload_yaml_is_escaped(world: World, run: Run) -> None:
    html = page(world.client_for(world.alice), run)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html


def test_attempts_and_nodes_with_exit_codes(world: World, run: Run) -> None:
    first = run.attempts.get()
    first.status, first.exit_code, first.state_message = RunStatus.FAILED, 137, "OOMKilled"
    first.save()
    second = Attempt.objects.create(run=run, number=2, status=RunStatus.SUCCEEDED, started_at=T0, exit_code=0)
    Node.objects.create(attempt=second, index=0, host="10.9.9.9", status=RunStatus.SUCCEEDED, exit_code=0)
    html = page(world.client_for(world.alice), run)
    assert "Attempt 2" in html and "10.9.9.9" in html
    assert "137" in html and "OOMKilled" in html
    assert 'data-figure="fig-timeline"' in html


def test_cost_with_a_price(world: World, run: Run) -> None:
    AcceleratorPrice.objects.create(
        accelerator_type=run.accelerator_type, region=run.region, effective_from=T0 - timedelta(days=30), usd_per_hour=2
    )
    html = page(world.client_for(world.alice), run)
    # 8 accelerators x 1 hour x $2.
    assert "$16.00" in html
    assert "8.00" in html  # GPU-hours
    assert "Lower bound" not in html


def test_cost_without_a_price_says_why(world: World, run: Run) -> None:
    html = page(world.client_for(world.alice), run)
    assert "Lower bound" in html
    assert "us-east-1" in html and "No price for GPU_8xH100" in html


def test_log_lines_with_numbers_and_the_tail_cap(world: World, run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("runs.views.detail.INLINE_LINE_LIMIT", 10)
    write_log(node_of(run), "".join(f"step {i} loss=0.{i}\n" for i in range(1, 26)))
    html = page(world.client_for(world.alice), run)
    assert '<a class="ln" href="#L25">25</a>step 25 loss=0.25' in html
    assert 'id="L16"' in html
    assert 'id="L15"' not in html  # only the last 10 lines inline
    assert "Showing lines 16\u201325" in html and "15 earlier lines" in html
    assert "download=1" in html


def test_log_search_highlights_and_counts(world: World, run: Run) -> None:
    write_log(node_of(run), "ok\nRuntimeError: CUDA out of memory\nok\nretrying\ncuda OUT of memory\n")
    html = page(world.client_for(world.alice), run, q="out of memory")
    assert "2 matching lines" in html
    assert "<mark>out of memory</mark>" in html and "<mark>OUT of memory</mark>" in html
    assert 'id="L2"' in html and 'id="L5"' in html
    assert 'id="L4"' not in html


def test_log_search_is_escaped(world: World, run: Run) -> None:
    write_log(node_of(run), "value <b>bold</b>\n")
    html = page(world.client_for(world.alice), run, q="<b>")
    assert "<mark>&lt;b&gt;</mark>bold" in html


def test_log_viewer_chooses_attempt_and_node(world: World, run: Run) -> None:
    second = Attempt.objects.create(run=run, number=2, status=RunStatus.RUNNING, started_at=T0 + timedelta(hours=2))
    worker = Node.objects.create(attempt=second, index=1)
    Node.objects.create(attempt=second, index=0)
    write_log(node_of(run), "first attempt log line\n")
    write_log(worker, "second attempt worker line\n")
    alice = world.client_for(world.alice)
    assert "second attempt worker line" in page(alice, run, attempt=2, node=1)
    assert "first attempt log line" in page(alice, run, attempt=1, node=0)
    # Nonsense falls back to the latest attempt's first node, never a 500.
    assert "No log received for attempt 2, node 0" in page(alice, run, attempt="x", node="-1")


def test_download_returns_the_whole_log_as_an_attachment(world: World, run: Run) -> None:
    text = "".join(f"line {i}\n" for i in range(12_000))
    write_log(node_of(run), text, pieces=7)
    response = world.client_for(world.alice).get(
        reverse("run_log", args=[run.pk]), {"attempt": 1, "node": 0, "download": 1}
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="vis-llama-7-attempt1-node0.log"'
    assert b"".join(response.streaming_content).decode() == text


def test_log_endpoint_refuses_a_node_that_does_not_exist(world: World, run: Run) -> None:
    alice = world.client_for(world.alice)
    url = reverse("run_log", args=[run.pk])
    assert alice.get(url, {"attempt": 1, "node": 0}).status_code == 200
    assert alice.get(url, {"attempt": 1, "node": 5}).status_code == 404
    assert alice.get(url, {"attempt": 9}).status_code == 404


def test_log_endpoint_search_is_grep_like(world: World, run: Run) -> None:
    write_log(node_of(run), "a\nNCCL error\nb\nnccl timeout\n")
    response = world.client_for(world.alice).get(reverse("run_log", args=[run.pk]), {"q": "nccl"})
    assert "Content-Disposition" not in response
    assert b"".join(response.streaming_content).decode() == "2:NCCL error\n4:nccl timeout\n"


def test_charts_when_telemetry_exists(world: World, run: Run) -> None:
    node = node_of(run)
    GpuSample.objects.bulk_create(
        GpuSample(
            run=run,
            node=node,
            gpu_index=gpu,
            ts=T0 + timedelta(seconds=s),
            utilization_gpu=90.0,
            memory_used_bytes=70 * 10**9,
        )
        for gpu in range(8)
        for s in range(3)
    )
    MetricPoint.objects.create(run=run, key="train/loss", step=1, ts=T0, value=2.5)
    html = page(world.client_for(world.alice), run)
    for figure_id in ("fig-metrics", "fig-timeline"):
        assert f'<script id="{figure_id}" type="application/json">' in html
        assert f'data-figure="{figure_id}"' in html
    # The GPU panels ship as frames: charts.js asks telemetry.json for their data.
    for figure_id, field in (("fig-utilization", "utilization_gpu"), ("fig-memory", "memory_used_bytes")):
        assert f'data-figure="{figure_id}" data-field="{field}"' in html
        assert f'<script id="{figure_id}"' not in html
    assert f'data-telemetry="/runs/{run.pk}/telemetry.json"' in html
    body = (
        world.client_for(world.alice)
        .get(f"/runs/{run.pk}/telemetry.json", {"fields": "utilization_gpu", "view": "gpus"})
        .json()
    )
    assert "node 0 · GPU 7" in {trace["name"] for trace in body["panels"][0]["figure"]["data"]}


def test_empty_states_instead_of_empty_charts(world: World, run: Run) -> None:
    html = page(world.client_for(world.alice), run)
    assert 'data-figure="fig-utilization"' not in html
    assert "No GPU utilization samples for this run" in html
    assert "No MLflow metrics collected for this run" in html
    assert "No log received for attempt 1, node 0 yet" in html


def test_plotly_is_served_locally(world: World, run: Run) -> None:
    html = page(world.client_for(world.alice), run)
    assert '<script src="/static/vendor/plotly.min.js" defer></script>' in html
    response = Client().get("/static/vendor/plotly.min.js")
    assert response.status_code == 200
    assert b"plotly.js" in b"".join(response.streaming_content)[:500]
    for asset in ("/static/js/charts.js", "/static/js/logs.js", "/static/css/airboard.css"):
        assert Client().get(asset).status_code == 200


@pytest.mark.parametrize("name", ["login", "overview", "run_list", "run_detail", "run_log_search"])
def test_no_inline_or_remote_scripts_on_any_page(world: World, run: Run, name: str) -> None:
    write_log(node_of(run), "hello </script><script>alert(1)</script>\n")
    alice = world.client_for(world.alice)
    if name == "login":
        html = Client().get(reverse("login")).content.decode()
    elif name == "run_detail":
        html = page(alice, run)
    elif name == "run_log_search":
        html = page(alice, run, q="script")
    else:
        html = alice.get(reverse(name)).content.decode()
    assert "<script" in html or name in ("login", "overview", "run_list")
    assert not INLINE_SCRIPT.search(html), INLINE_SCRIPT.search(html)
    assert not REMOTE_SCRIPT.search(html)
    assert "http://" not in html.split("<body", 1)[0] and "https://" not in html.split("<body", 1)[0]


def test_inline_script_regex_catches_what_it_should() -> None:
    assert INLINE_SCRIPT.search("<script>alert(1)</script>")
    assert INLINE_SCRIPT.search('<script type="module">x</script>')
    assert not INLINE_SCRIPT.search('<script src="/static/js/charts.js" defer></script>')
    assert not INLINE_SCRIPT.search('<script id="f" type="application/json">{}</script>')
    assert REMOTE_SCRIPT.search('<script src="https://cdn.plot.ly/plotly.js"></script>')


def test_running_run_cost_accrues_and_shows_so_far(world: World, settings: Settings) -> None:
    run = make_run(world.vision, "live", status=RunStatus.RUNNING, ended_at=None)
    attempt = run.attempts.get()
    attempt.ended_at = None
    attempt.save()
    AcceleratorPrice.objects.create(
        accelerator_type=run.accelerator_type,
        region=run.region,
        effective_from=T0 - timedelta(days=1),
        usd_per_hour=Decimal("1.5"),
    )
    html = page(world.client_for(world.alice), run)
    assert "so far" in html
    assert "still running" in html
