"""`/metrics`: the token rules, and the exposition format and figures Prometheus reads."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.test import Client
from pytest_django.fixtures import Settings

from billing.models import CostDaily
from dashboard.metrics import escape_label, exposition
from runs.choices import BatchKind, BatchStatus, CollectorKind, RunStatus
from runs.models import CollectorState, GpuMinute, IngestBatch, Node
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db

TOKEN = "prom-scrape-token-1234"
# One sample line of the text format: name, optional {labels}, value.
SAMPLE = re.compile(
    r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?P<labels>(?:[a-zA-Z_]\w*="(?:[^"\\\n]|\\[\\"n])*",?)*)\})? '
    r"(?P<value>-?[0-9.e+-]+|NaN|[+-]Inf)$"
)
LABEL = re.compile(r'([a-zA-Z_]\w*)="((?:[^"\\\n]|\\[\\"n])*)"')


def parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The exposition as {name: [(labels, value)]}, checking every line's shape on the way."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    typed: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("gauge", "counter"), line
            assert name not in typed, f"TYPE given twice for {name}"
            typed.add(name)
            continue
        match = SAMPLE.match(line)
        assert match, f"not an exposition line: {line!r}"
        assert match["name"] in typed, f"{match['name']} has no TYPE line before it"
        labels = {k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
                  for k, v in LABEL.findall(match["labels"] or "")}  # fmt: skip
        samples.setdefault(match["name"], []).append((labels, float(match["value"])))
    return samples


def scrape(token: str | None = TOKEN) -> object:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return Client(headers=headers).get("/metrics")


def test_no_token_configured_is_404(settings: Settings) -> None:
    settings.AIRBOARD_METRICS_TOKEN = ""
    assert scrape().status_code == 404


def test_missing_or_wrong_token_is_401(settings: Settings) -> None:
    settings.AIRBOARD_METRICS_TOKEN = TOKEN
    for token in (None, "wrong", TOKEN + "x"):
        response = scrape(token)
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Bearer")
    basic = Client(headers={"authorization": f"Basic {TOKEN}"}).get("/metrics")
    assert basic.status_code == 401


def test_a_team_member_without_the_token_gets_nothing(settings: Settings, world: World) -> None:
    settings.AIRBOARD_METRICS_TOKEN = TOKEN
    assert world.client_for(world.alice).get("/metrics").status_code == 401
    settings.AIRBOARD_METRICS_TOKEN = ""
    assert world.client_for(world.alice).get("/metrics").status_code == 404


@pytest.mark.parametrize("token", [TOKEN, ""])
def test_signed_in_staff_read_the_figures_in_the_browser_token_or_not(
    settings: Settings, world: World, token: str
) -> None:
    # Staff see every team on the pages already; the demo's admin tries /metrics without a restart.
    settings.AIRBOARD_METRICS_TOKEN = token
    response = world.client_for(world.sam).get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE airboard_" in response.content.decode()


def test_label_escaping() -> None:
    assert escape_label('a\\b"c\nd') == 'a\\\\b\\"c\\nd'


@time_machine.travel(T0 + timedelta(days=10), tick=False)
def test_figures(settings: Settings, world: World) -> None:
    settings.AIRBOARD_METRICS_TOKEN = TOKEN
    now = T0 + timedelta(days=10)
    # Spend: two days this month, one last month (left out); a policy name that needs escaping.
    for day, usd, policy in ((now.date(), "10.25", 'gpu "big"'), (now.date() - timedelta(days=1), "5", 'gpu "big"'),
                             (now.date().replace(day=1) - timedelta(days=1), "999", 'gpu "big"'),
                             (now.date(), "2", "")):  # fmt: skip
        CostDaily.objects.create(day=day, team=world.vision, usage_policy_name=policy, experiment_name=f"e{usd}",
                                 compute_usd=Decimal(usd), egress_usd=Decimal("0.5"))  # fmt: skip
    # Utilization: a running run with minutes inside the window (80, 60) and one outside it (0).
    running = make_run(world.vision, "live", status=RunStatus.RUNNING, ended_at=None)
    node = Node.objects.get(attempt__run=running)
    for minutes_ago, value in ((1, 80.0), (3, 60.0), (30, 0.0)):
        GpuMinute.objects.create(run=running, node=node, gpu_index=0, minute=now - timedelta(minutes=minutes_ago),
                                 samples=60, utilization_gpu_avg=value)  # fmt: skip
    make_run(world.nlp, "nlp-failed", status=RunStatus.FAILED)
    CollectorState.objects.create(name="mlflow", kind=CollectorKind.MLFLOW, last_success_at=now - timedelta(seconds=42),
                                  items_total=7)  # fmt: skip
    CollectorState.objects.create(name="logs", kind=CollectorKind.LOGS)
    outcomes = [(BatchStatus.DONE, 100, 3), (BatchStatus.DONE, 50, 0), (BatchStatus.FAILED, None, None),
                (BatchStatus.PENDING, None, None)]  # fmt: skip
    for i, (status, inserted, dups) in enumerate(outcomes):
        IngestBatch.objects.create(team=world.vision, kind=BatchKind.GPU_SAMPLES, content_hash=f"{i:064d}", rows=[],
                                   row_count=10, status=status, inserted=inserted, duplicates=dups)  # fmt: skip

    response = scrape()
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    metrics = parse(response.content.decode())

    spend = {(labels["team"], labels["policy"]): value for labels, value in metrics["airboard_spend_month_to_date_usd"]}
    assert spend == {("vision", 'gpu "big"'): 16.25, ("vision", ""): 2.5}
    assert metrics["airboard_gpu_utilization_percent"] == [({"team": "vision"}, 70.0)]
    assert metrics["airboard_collector_lag_seconds"] == [({"collector": "mlflow", "kind": "mlflow"}, 42.0)]
    assert {labels["collector"]: v for labels, v in metrics["airboard_collector_items_total"]} == {
        "logs": 0,
        "mlflow": 7,
    }
    batches = {labels["status"]: value for labels, value in metrics["airboard_ingest_batches_total"]}
    assert batches == {"done": 2, "failed": 1}
    assert metrics["airboard_ingest_rows_total"] == [({"kind": "gpu_samples"}, 150)]
    assert metrics["airboard_ingest_duplicate_rows_total"] == [({"kind": "gpu_samples"}, 3)]
    assert metrics["airboard_ingest_batches_pending"] == [({"kind": "gpu_samples"}, 1)]
    runs = {(labels["team"], labels["status"]): v for labels, v in metrics["airboard_runs"]}
    assert runs[("vision", "running")] == 1 and runs[("nlp", "failed")] == 1 and runs[("nlp", "running")] == 0


def test_empty_database_is_still_valid_exposition() -> None:
    text = exposition()
    assert parse(text) == {}
    assert text.count("# TYPE ") == text.count("# HELP ") >= 8
