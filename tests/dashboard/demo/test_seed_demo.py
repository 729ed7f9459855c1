"""seed_demo: a deterministic, realistic demo workspace (runs/demo*.py and the command)."""

from __future__ import annotations

import io
import random
import re
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.db import transaction
from django.db.models import F, Max, Min
from django.db.models.functions import TruncMinute
from django.test import override_settings
from pytest_django import DjangoDbBlocker

from billing.models import EgressRecord
from dashboard.demo.constants import demo_password
from dashboard.demo.log_context import FAILURES, LogContext
from dashboard.demo.logs import node_log
from dashboard.demo.seed import DEMO_EMAIL_DOMAIN, TEAMS, build_plan
from dashboard.demo.series import TrainingCurve
from dashboard.demo.write import reset_demo, seed_demo
from runs.choices import GPUS_PER_NODE, AcceleratorType, Region, RunSource, RunStatus, TelemetrySource
from runs.failures.classify import classify_text
from runs.failures.logphrases import kinds_in
from runs.logs import chunk_texts
from runs.models import Attempt, GpuHour, GpuMinute, GpuSample, LogChunk, LogPhrase, MetricPoint, Node, Run
from runs.workload.schema import parse_workload
from tests.conftest import make_run

NOW = datetime(2026, 3, 12, 15, 0, tzinfo=UTC)  # a Thursday afternoon
RUNS = 60
VALID_COUNTS = {
    AcceleratorType.A10_1: {1, 2, 3, 4},
    AcceleratorType.H100_1: {1},
    AcceleratorType.H100_8: {8, 16, 32, 64},
    AcceleratorType.B300_8: {8, 16, 32, 64},
}
# Shapes of real credentials; a demo workload must never carry one.
LITERAL_SECRETS = re.compile(
    r"hf_[A-Za-z0-9]{20,}|dapi[0-9a-f]{32}|ghp_[A-Za-z0-9]{36}|AKIA[0-9A-Z]{16}|sk-[A-Za-z0-9]{20,}|xox[bp]-"
)
# What each demo failure must be recognised as by the failure classifier.
EXPECTED_CLASS = {
    "cuda_oom": "cuda_oom", "nccl_timeout": "nccl_timeout", "illegal_memory_access": "illegal_memory_access",
    "device_assert": "device_assert", "host_oom": "host_oom", "xid79": "gpu_hardware",
    "module_not_found": "dependency_error", "nan_loss": "nan_divergence", "disk_full": "disk_full",
    "result_too_large": "serialization_too_large", "segfault": "segfault",
}  # fmt: skip


def seed(**options: object) -> tuple[dict[str, int] | None, str]:
    out = io.StringIO()
    # The plan's invariants are checked on the planned runs alone; tests/dashboard/demo/test_demo_clusters.py
    # covers the advice examples the seed adds by default.
    options = {"seed": 42, "now": NOW, "runs": RUNS, "advice_examples": False, **options}
    counts = seed_demo(log=lambda line: out.write(f"{line}\n"), **options)  # type: ignore[arg-type]
    return counts, out.getvalue()


def demo_users() -> list[User]:
    return list(User.objects.filter(email__endswith=f"@{DEMO_EMAIL_DOMAIN}"))


def snapshot() -> list[tuple]:
    """What determinism promises: the same runs, attempts and nodes (database ids aside)."""
    runs = Run.objects.filter(is_demo=True).order_by("external_id")
    fields = ("external_id", "status", "submitted_at", "ended_at", "accelerator_type", "num_accelerators",
              "region", "experiment_name", "state_message", "workload_yaml", "parameters")  # fmt: skip
    rows = [tuple(values) for values in runs.values_list(*fields)]
    rows += sorted(Attempt.objects.filter(run__is_demo=True).values_list("run__external_id", "number", "exit_code"))
    rows += sorted(Node.objects.filter(attempt__run__is_demo=True).values_list("attempt__run__external_id", "host"))
    rows += sorted(LogChunk.objects.filter(node__attempt__run__is_demo=True).values_list("node__host", "seq", "text"))
    return rows


@pytest.mark.django_db
class TestSeededWorkspace:
    """Read-only checks on one 60-run seed, shared by the class like Django's setUpTestData."""

    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def seeded(cls, django_db_setup: None, django_db_blocker: DjangoDbBlocker) -> Iterator[dict[str, int]]:
        md5 = override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"])
        with django_db_blocker.unblock(), md5, transaction.atomic():
            counts, _ = seed()
            assert counts
            yield counts
            transaction.set_rollback(True)

    def test_teams_and_people(self) -> None:
        assert set(Group.objects.values_list("name", flat=True)) == {t.name for t in TEAMS}
        users = {u.username: u for u in demo_users()}
        assert len(users) == 11
        assert users["alice"].groups.count() == 1
        assert users["alice"].check_password(demo_password())
        assert users["admin"].is_staff and users["admin"].is_superuser
        assert users["admin"].check_password(demo_password())
        assert not users["bob"].is_staff
        assert all(t.members for t in TEAMS)

    def test_runs_cover_every_shape_and_region_with_valid_counts(self) -> None:
        runs = list(Run.objects.all())
        assert len(runs) == RUNS and all(r.is_demo for r in runs)
        assert {r.accelerator_type for r in runs} >= set(AcceleratorType.values)
        assert {r.region for r in runs} >= set(Region.values)
        for run in runs:
            if run.accelerator_type:
                assert run.num_accelerators in VALID_COUNTS[run.accelerator_type], run
            if run.source == RunSource.SERVERLESS:
                assert run.gpus_per_node == GPUS_PER_NODE[run.accelerator_type]
                assert run.home_region in {t.home_region for t in TEAMS}
            assert re.fullmatch(r"[0-9a-f]{32}", run.mlflow_run_id)
        for attempt in Attempt.objects.select_related("run").prefetch_related("nodes"):
            if attempt.started_at:
                expected = max(1, attempt.run.num_accelerators // attempt.run.gpus_per_node)
                assert attempt.nodes.count() == expected
        sources = Counter(r.source for r in runs)
        assert sources[RunSource.SERVERLESS] > sources[RunSource.CLASSIC] > 0

    def test_live_failed_and_retried_runs(self) -> None:
        running = Run.objects.filter(status=RunStatus.RUNNING)
        assert running.exists()
        assert all(r.started_at and r.started_at > NOW - timedelta(days=2) and not r.ended_at for r in running)
        assert Run.objects.filter(status=RunStatus.QUEUED, started_at__isnull=True).exists()
        failed = Run.objects.filter(status=RunStatus.FAILED)
        assert failed.exists() and all(r.state_message for r in failed)
        assert all(a.exit_code for a in Attempt.objects.filter(status=RunStatus.FAILED))
        retried = Run.objects.filter(attempts__number=2).distinct()
        assert retried.exists()
        for run in retried:
            attempts = list(run.attempts.order_by("number"))
            assert all(a.status == RunStatus.FAILED and a.exit_code for a in attempts[:-1])
            assert len({a.mlflow_run_id for a in attempts}) == len(attempts)  # a new MLflow run per retry

    def test_failed_attempts_leave_a_classifiable_error_in_their_logs(self) -> None:
        checked = 0
        for attempt in Attempt.objects.filter(status=RunStatus.FAILED, nodes__log_chunks__isnull=False).distinct():
            node = attempt.nodes.filter(exit_code=attempt.exit_code, log_chunks__isnull=False).distinct().get()
            text = "".join(chunk_texts(node))
            assert "Traceback" in text or "Fatal Python error" in text or "Out of memory: Killed" in text
            assert classify_text(text, exit_code=attempt.exit_code).class_id not in ("none", "other"), text[-800:]
            checked += 1
        assert checked
        for node_id in LogChunk.objects.values_list("node_id", flat=True).distinct():
            chunks = list(LogChunk.objects.filter(node_id=node_id).order_by("seq"))
            assert [c.seq for c in chunks] == list(range(len(chunks)))
            assert all(c.line_count == c.text.count("\n") > 0 for c in chunks)

    def test_logs_phrases_are_noted_for_advice(self) -> None:
        """The seed writes logs in bulk, then notes advice's phrases as append_log_chunk would."""
        assert not LogChunk.objects.filter(phrases_noted=False).exists()
        noted = set(LogPhrase.objects.values_list("run_id", "kind"))
        assert ("checkpoint" in {kind for _, kind in noted}) and noted == {
            (chunk.node.attempt.run_id, kind)
            for chunk in LogChunk.objects.select_related("node__attempt")
            for kind in kinds_in(chunk.text)
        }

    def test_cross_region_runs_have_egress(self) -> None:
        cross = [r for r in Run.objects.exclude(region="") if r.is_cross_region and r.started_at]
        assert cross
        for run in cross:
            records = list(run.egress_records.all())
            assert records and all(r.bytes > 10**8 for r in records)
            assert {(r.source_region, r.destination_region) for r in records} <= {
                (run.home_region, run.region),
                (run.region, run.home_region),
            }
        assert not EgressRecord.objects.filter(run__region=F("run__home_region")).exists()

    def test_raw_telemetry_has_its_rollups_and_older_runs_have_direct_ones(self) -> None:
        samples = GpuSample.objects.all()
        assert samples.exists() and not samples.exclude(source=TelemetrySource.DEMO).exists()
        assert samples.filter(sm_active__isnull=False, tensor_active__isnull=False).exists()  # Hopper GPM fields
        raw_minutes = set(
            samples.annotate(m=TruncMinute("ts")).values_list("run_id", "node_id", "gpu_index", "m").distinct()
        )
        rolled = set(GpuMinute.objects.values_list("run_id", "node_id", "gpu_index", "minute"))
        assert raw_minutes <= rolled
        raw_runs = set(samples.values_list("run_id", flat=True))
        direct = GpuMinute.objects.exclude(run_id__in=raw_runs)
        assert direct.filter(samples=60).exists()
        for row in direct.order_by("?")[:200]:
            assert row.utilization_gpu_min <= row.utilization_gpu_avg <= row.utilization_gpu_max <= 100
            assert row.memory_used_bytes_max <= row.memory_total_bytes
        # The run that just died of CUDA OOM shows its memory climbing to the card's total
        # (raw samples cover its last minutes, direct rollups the time before).
        oom = Run.objects.filter(state_message__startswith="torch.OutOfMemoryError", gpu_samples__isnull=False)[0]
        minutes = oom.gpu_minutes.filter(gpu_index=0).order_by("minute")
        last = minutes.last()
        earlier = minutes.get(minute=last.minute - timedelta(minutes=15))
        assert earlier.memory_used_bytes_max < last.memory_used_bytes_max
        assert last.memory_used_bytes_max > 0.97 * last.memory_total_bytes > earlier.memory_used_bytes_max

    def test_every_demo_gpu_hour_is_the_fold_of_its_minutes(self, seeded: dict[str, int]) -> None:
        hours = {
            (r, n, g, h): (samples, umin, umax, mmax)
            for r, n, g, h, samples, umin, umax, mmax in GpuHour.objects.values_list(
                "run_id", "node_id", "gpu_index", "hour", "samples", "utilization_gpu_min", "utilization_gpu_max",
                "memory_used_bytes_max",
            )
        }  # fmt: skip
        assert seeded["gpu hours"] == len(hours) > 0
        folded: dict[tuple, list] = {}
        for r, n, g, m, samples, umin, umax, mmax in GpuMinute.objects.values_list(
            "run_id", "node_id", "gpu_index", "minute", "samples", "utilization_gpu_min", "utilization_gpu_max",
            "memory_used_bytes_max",
        ):  # fmt: skip
            acc = folded.setdefault((r, n, g, m.replace(minute=0)), [0, [], [], []])
            acc[0] += samples
            for i, value in ((1, umin), (2, umax), (3, mmax)):
                if value is not None:
                    acc[i].append(value)
        assert set(hours) == set(folded)  # an hour for every GPU-hour with minutes, none without
        for key, (samples, umins, umaxes, mmaxes) in folded.items():
            assert hours[key] == (
                samples,
                min(umins, default=None),
                max(umaxes, default=None),
                max(mmaxes, default=None),
            )
        # The hour in which a run's raw window starts holds direct and raw-derived minutes alike.
        start = GpuSample.objects.order_by("ts").values_list("run_id", "ts")[0]
        hour = GpuHour.objects.get(run_id=start[0], gpu_index=0, hour=start[1].replace(minute=0, second=0))
        assert hour.samples > GpuSample.objects.filter(run_id=start[0], gpu_index=0, ts__gte=hour.hour,
                                                       ts__lt=hour.hour + timedelta(hours=1)).count()  # fmt: skip

    def test_metrics_look_like_training(self) -> None:
        run = Run.objects.filter(status=RunStatus.SUCCEEDED, metric_points__key="loss").distinct().first()
        loss = list(run.metric_points.filter(key="loss").order_by("step").values_list("value", flat=True))
        assert len(loss) > 20 and loss[-1] < 0.7 * loss[0]
        keys = set(run.metric_points.values_list("key", flat=True))
        assert {"loss", "learning_rate", "grad_norm", "eval_loss"} <= keys
        assert keys & {"tokens_per_second", "samples_per_second"}
        diverged = Run.objects.filter(state_message__startswith="FloatingPointError", metric_points__isnull=False)[0]
        tail = list(diverged.metric_points.filter(key="loss").order_by("-step").values_list("value", flat=True)[:3])
        assert tail[0] is None and tail[-1] is not None

    def test_workload_yaml_is_valid_and_holds_only_secret_references(self) -> None:
        for run in Run.objects.all():
            if run.source != RunSource.SERVERLESS:
                assert run.workload_yaml == ""
                continue
            assert not LITERAL_SECRETS.search(run.workload_yaml)
            workload = parse_workload(run.workload_yaml)
            assert (workload.accelerator_type, workload.num_accelerators) == (
                run.accelerator_type,
                run.num_accelerators,
            )
            # The workload's experiment_name is the CLI's task key; the folder is its own key.
            assert f"{workload.mlflow_experiment_directory}/{workload.experiment_name}" == run.experiment_name
            assert workload.usage_policy_name == run.usage_policy_name
            assert workload.secrets and all(re.fullmatch(r"[\w.-]+/[\w.-]+", ref) for ref in workload.secrets.values())
            assert yaml.safe_load(run.workload_yaml)["max_retries"] == run.max_retries

    def test_times_stay_within_the_last_ninety_days(self) -> None:
        span = Run.objects.aggregate(first=Min("submitted_at"), last=Max("submitted_at"))
        assert span["first"] >= NOW - timedelta(days=90) and span["last"] <= NOW
        assert not Run.objects.filter(ended_at__gt=NOW).exists()
        assert not MetricPoint.objects.filter(ts__gt=NOW).exists()


def test_the_plan_is_deterministic() -> None:
    first, again = build_plan(42, NOW, 200), build_plan(42, NOW, 200)
    assert first.runs == again.runs
    assert build_plan(43, NOW, 200).runs != first.runs
    statuses = Counter(r.status for r in first.runs)
    assert statuses[RunStatus.SUCCEEDED] > statuses[RunStatus.FAILED] > 0


@pytest.mark.parametrize("kind", sorted(FAILURES))
@pytest.mark.parametrize("nodes", [1, 2])
def test_every_failure_tail_is_recognised_by_the_classifier(kind: str, nodes: int) -> None:
    start = NOW - timedelta(hours=2)
    ctx = LogContext(
        experiment="llama3-8b-sft", family="nlp", accelerator_type="GPU_8xH100", gpus_per_node=8,
        hosts=tuple(f"10.12.0.{i + 2}" for i in range(nodes)), node_index=nodes - 1, attempt=1, start=start,
        end=start + timedelta(hours=1), status=RunStatus.FAILED, failure=kind, failed_node=nodes - 1,
        failed_local_rank=3, curve=TrainingCurve(5000, 1.0, 2.0, 1.0, 1e-4, 100, "tokens_per_second", 9e3),
        checkpoint_dir="/Volumes/main/nlp/checkpoints/x", source="classic" if nodes > 1 else "serverless",
    )  # fmt: skip
    text = "".join(node_log(random.Random(7), ctx))
    assert text == "".join(node_log(random.Random(7), ctx))
    assert classify_text(text, exit_code=FAILURES[kind].exit_code).class_id == EXPECTED_CLASS[kind]


@pytest.mark.django_db
def test_the_same_seed_and_now_write_the_same_data() -> None:
    seed(runs=20)
    before = snapshot()
    seed(runs=20, reset=True)
    assert snapshot() == before
    seed(runs=20, reset=True, seed=7)
    assert snapshot() != before


@pytest.mark.django_db
def test_if_empty_does_nothing_when_any_run_exists() -> None:
    make_run(Group.objects.create(name="platform"), external_id="real-1")
    out = io.StringIO()
    call_command("seed_demo", "--if-empty", "--runs", "5", stdout=out)
    assert "--if-empty" in out.getvalue()
    assert not Run.objects.filter(is_demo=True).exists() and not demo_users()


@pytest.mark.django_db
def test_if_empty_seeds_an_empty_database() -> None:
    out = io.StringIO()
    call_command("seed_demo", "--if-empty", "--runs", "12", "--seed", "3", "--without-advice-examples", stdout=out)
    assert Run.objects.filter(is_demo=True).count() == 12
    assert "Done:" in out.getvalue()


@pytest.mark.django_db
def test_a_second_seed_without_reset_writes_nothing() -> None:
    seed(runs=15)
    counts, out = seed(runs=15, seed=9)
    assert counts is None and "--reset" in out
    assert Run.objects.count() == 15 and len(demo_users()) == 11


@pytest.mark.django_db
def test_reset_removes_only_demo_data() -> None:
    platform = Group.objects.create(name="platform")
    zoe = User.objects.create_user("zoe", "zoe@example.com", "x")
    zoe.groups.add(platform)
    real = make_run(platform, external_id="real-1", user=zoe)
    seed(runs=15)
    # A real member of a demo-named team keeps that team alive through a reset.
    zoe.groups.add(Group.objects.get(name="speech"))

    seed(runs=15, reset=True)
    assert Run.objects.filter(is_demo=True).count() == 15 and len(demo_users()) == 11

    removed = reset_demo()
    assert removed == {"runs": 15, "clusters": 0, "users": 11, "teams": 2}
    assert list(Run.objects.all()) == [real]
    assert set(Group.objects.values_list("name", flat=True)) == {"platform", "speech"}
    assert list(User.objects.all()) == [zoe]
    assert not GpuMinute.objects.exists() and not GpuHour.objects.exists()
    assert not LogChunk.objects.exists() and not EgressRecord.objects.exists()


@pytest.mark.django_db
def test_an_existing_real_user_is_left_alone() -> None:
    admin = User.objects.create_superuser("admin", "ops@example.com", "their-own-password")
    _, out = seed(runs=10)
    admin.refresh_from_db()
    assert admin.email == "ops@example.com" and admin.check_password("their-own-password")
    assert "'admin' already exists" in out
    reset_demo()
    assert User.objects.filter(pk=admin.pk).exists()


def test_demo_nvlink_only_between_gpus_of_a_multi_gpu_node() -> None:
    import random
    from datetime import UTC, datetime, timedelta

    from dashboard.demo.series import PROFILES, Activity, minute_rollups, raw_samples
    from runs.choices import AcceleratorType

    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
    activity = Activity(start, start + timedelta(minutes=5), None, 0.85, 3600, 7200, 60)
    h100 = PROFILES[AcceleratorType.H100_8]
    eight = list(raw_samples(random.Random(1), h100, activity, start + timedelta(minutes=2), 8))
    busy = [f for _, _, f in eight if f["utilization_gpu"] > 90]
    # A busy SXM H100 moves tens to ~135 GB/s of gradients each way; RX just under TX.
    assert busy and all(20e9 / 1024 < f["nvlink_tx_kbps"] <= 450e9 * 0.3 / 1024 for f in busy)
    assert all(f["nvlink_rx_kbps"] < f["nvlink_tx_kbps"] for f in busy)
    one = list(raw_samples(random.Random(1), h100, activity, start + timedelta(minutes=2), 1))
    assert all("nvlink_tx_kbps" not in f for _, _, f in one)  # one GPU: nothing to talk to
    a10 = PROFILES[AcceleratorType.A10_1]
    assert all("nvlink_tx_kbps" not in f for _, _, f in raw_samples(random.Random(1), a10, activity, start, 2))
    minutes = list(minute_rollups(random.Random(1), h100, activity, start, activity.end, 8))
    assert all(f["nvlink_tx_kbps_min"] <= f["nvlink_tx_kbps_avg"] <= f["nvlink_tx_kbps_max"] for _, _, f in minutes)
