"""Writing the demo plan (`dashboard.demo.seed`) to the database, and removing demo data again.

`seed_demo()` is what the `seed_demo` command runs:

1. With `if_empty`, do nothing when any run exists; without `reset`, do nothing when demo
   runs exist (a second seed never duplicates).
2. Load the default price book (`load_prices --default`) when that command is installed.
3. In one transaction: with `reset`, remove the demo data first; build the plan; write the
   people, runs, attempts and nodes with bulk inserts; then what hangs off them (logs,
   metrics, 1 Hz telemetry through `store_gpu_samples`, minute rollups, egress), each drawn
   from its own seeded generator so that the same seed and `now` write the same rows.
4. Hour rollups of every demo minute rollup (the plan's and the advice examples'), rebuilt
   from those minutes by the ingest path's own `refresh_hours`, so the fleet history and
   long-range charts show the demo and agree with its minutes.

Volumes are bounded for speed (`DemoSize`): logs and metrics for the newest ~150 runs, raw
samples for ~6 live or just-finished runs (every node, at most the last 45 minutes, ~60k
rows), and minute rollups for the newest ~300 runs (every node over the same span; running
and just-failed runs for their whole life, the others an equal share; ~210k rows), scaled
down with `runs`.
Every node of a run has the same span, so the node-skew table compares like with like.

What the live demo continues is a function of the run's row, not of this seed's generators:
the training curve (`dashboard.demo.seed.run_curve`), the attempt's activity
(`Activity.for_attempt`) and each node's skew (`node_skew`).

Demo data is recognisable without a model change: runs carry `is_demo`, personas have
`@demo.airboard.example` addresses, and a demo team is removed only once no other member or
run uses it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from django.contrib.auth.hashers import get_hasher, make_password
from django.contrib.auth.models import Group, User
from django.core.management import call_command, get_commands
from django.db import connection, transaction
from django.db.models import Field as DjangoField
from django.db.models import Model, QuerySet
from django.db.models.functions import TruncHour
from django.utils import timezone

from billing.models import EgressRecord
from dashboard.demo.clusters import remove_demo_clusters, write_demo_clusters
from dashboard.demo.constants import demo_password
from dashboard.demo.log_context import LogContext, checkpoint_dir
from dashboard.demo.logs import node_log
from dashboard.demo.seed import (
    ADMIN_USERNAME,
    DEMO_EMAIL_DOMAIN,
    PEOPLE,
    TEAMS,
    AttemptPlan,
    DemoPlan,
    RunPlan,
    build_plan,
    rng_for,
)
from dashboard.demo.seed import email as demo_email
from dashboard.demo.series import PROFILES, Activity, metric_points, minute_rollups, node_skew, raw_samples
from dashboard.kit.progress import Progress
from runs.choices import RunStatus, TelemetrySource
from runs.failures import logphrases
from runs.models import Attempt, GpuMinute, GpuSample, LogChunk, MetricPoint, Node, Run
from runs.telemetry import envelope_store, utilization
from runs.telemetry.store import refresh_hours, store_gpu_samples

Log = Callable[[str], object]
BATCH = 1000
RAW_WINDOW = timedelta(minutes=45)
RECENT = timedelta(hours=3)
# Percent of the minute-rollup budget the featured runs (running, or with 1 Hz samples) may
# take, for their whole life.
FEATURED_SHARE = 60


@dataclass(frozen=True)
class DemoSize:
    """How much of the expensive data to write, scaled to the number of runs (full at 2,000)."""

    log_runs: int
    telemetry_runs: int
    raw_sample_cap: int
    rollup_runs: int
    rollup_cap: int

    @classmethod
    def for_runs(cls, runs: int) -> DemoSize:
        share = runs / 2000
        return cls(
            log_runs=min(runs, max(20, round(150 * share))),
            telemetry_runs=6,
            raw_sample_cap=int(min(60_000, max(8_000, 60_000 * share))),
            rollup_runs=min(runs, max(30, round(300 * share))),
            rollup_cap=int(min(210_000, max(3_000, 210_000 * share))),
        )


class PhaseClock:
    """Prints one line per phase with its counts and the seconds since the start."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.start = time.perf_counter()

    def phase(self, name: str, detail: str) -> None:
        self.log(f"  {name:<10} {detail}  [{time.perf_counter() - self.start:5.1f}s]")


def is_demo_user(user: User) -> bool:
    return user.email.lower().endswith("@" + DEMO_EMAIL_DOMAIN)


def seed_demo(
    *, seed: int = 42, now: datetime | None = None, runs: int = 2000, reset: bool = False, if_empty: bool = False,
    advice_examples: bool = True, log: Log = print,
) -> dict[str, int] | None:  # fmt: skip
    """Seed the demo workspace (see the module docstring); returns row counts, None when skipped.

    `advice_examples` adds, beside the `runs` planned runs, the demo clusters and runs that
    trigger every configuration-advice rule (dashboard/demo/clusters.py).
    """
    now = (now or timezone.now()).replace(microsecond=0)
    if if_empty and Run.objects.exists():
        log("Runs already exist: --if-empty leaves the database as it is.")
        return None
    existing = Run.objects.filter(is_demo=True).count()
    if existing and not reset:
        log(f"Demo data already exists ({existing} demo runs); nothing written. Use --reset to rebuild it.")
        return None
    if "load_prices" in get_commands():
        call_command("load_prices", "--default")
    else:
        log("Note: no load_prices command yet; the price book was not loaded (costs will show as unpriced).")
    clock = PhaseClock(log)
    log(f"Seeding the demo workspace: seed {seed}, {runs} runs, now {now:%Y-%m-%d %H:%M:%S} UTC")
    with transaction.atomic():
        if reset:
            removed = reset_demo()
            clock.phase("reset", ", ".join(f"{v} {k}" for k, v in removed.items()))
        plan = build_plan(seed, now, runs)
        clock.phase("plan", f"{len(plan.runs)} runs, {sum(len(r.attempts) for r in plan.runs)} attempts")
        counts = write_plan(plan, clock)
        if advice_examples:
            counts |= write_demo_clusters(now)
        counts["gpu hours"] = write_hours(Run.objects.filter(is_demo=True))
        clock.phase("hours", f"{counts['gpu hours']} hour rollups from the minute rollups")
        # Most minutes were written directly, not by refresh_minutes: sum them into the runs' summaries.
        utilization.rebuild(Run.objects.filter(is_demo=True).values_list("pk", flat=True))
        envelope_store.rebuild(Run.objects.filter(is_demo=True).values_list("pk", flat=True))  # and their envelopes
    log("Done: " + ", ".join(f"{v} {k}" for k, v in counts.items()) + f" in {time.perf_counter() - clock.start:.1f}s.")
    # Printed here, once: the password is this workspace's own (var/demo_password).
    log(f"Log in as alice (or admin, staff) with password {demo_password()!r}.")
    return counts


def write_hours(runs: QuerySet[Run]) -> int:
    """Rebuild the GpuHour rows of every hour in which `runs` have minute rollups; returns the rows written.

    The seed writes most minutes directly, not through `store_gpu_samples`, and the hour in
    which a run's raw window starts holds minutes of both kinds: rebuilding each touched
    hour from all its minutes (what ingest does per batch) keeps the hours a pure function of
    the minutes. One DISTINCT query for the keys; refresh_hours groups them in a few more.
    """
    keys = (
        GpuMinute.objects.filter(run__in=runs)
        .annotate(hour=TruncHour("minute", tzinfo=UTC))
        .values_list("run_id", "node_id", "gpu_index", "hour")
        .distinct()
        .order_by()
    )
    return refresh_hours(keys)


def reset_demo() -> dict[str, int]:
    """Remove the demo runs (and all that hangs off them), the demo personas and emptied demo teams."""
    clusters = remove_demo_clusters()  # first: a cluster protects its team from deletion
    runs = Run.objects.filter(is_demo=True)
    counts = {"runs": runs.count(), **clusters}
    runs.delete()
    users = User.objects.filter(email__iendswith="@" + DEMO_EMAIL_DOMAIN)
    counts["users"] = users.count()
    users.delete()
    # A demo-named team stays while a real member or a real run still uses it.
    teams = Group.objects.filter(name__in=[t.name for t in TEAMS], user__isnull=True, runs__isnull=True).distinct()
    counts["teams"] = len(teams)
    Group.objects.filter(pk__in=[t.pk for t in teams]).delete()
    return counts


def write_plan(plan: DemoPlan, clock: PhaseClock, size: DemoSize | None = None) -> dict[str, int]:
    """Write a plan into an empty demo space; returns the row count of each kind."""
    size = size or DemoSize.for_runs(len(plan.runs))
    groups, users = _people(clock)
    counts = {"teams": len(groups), "users": sum(1 for u in users.values() if u)}
    node_ids = _write_runs(plan, groups, users)
    counts |= {"runs": len(plan.runs), "attempts": sum(len(r.attempts) for r in plan.runs), "nodes": len(node_ids)}
    clock.phase("runs", f"{counts['runs']} runs, {counts['attempts']} attempts, {counts['nodes']} nodes")
    recent = [r for r in plan.runs if r.started_at][: size.log_runs]
    counts["log chunks"] = _write_logs(plan, recent, node_ids)
    clock.phase("logs", f"{counts['log chunks']} chunks for {len(recent)} runs")
    counts["metric points"] = _write_metrics(plan, recent)
    clock.phase("metrics", f"{counts['metric points']} points")
    raw_from, counts["gpu samples"] = _write_samples(plan, size, node_ids)
    clock.phase("telemetry", f"{counts['gpu samples']} samples (1 Hz) for {len(raw_from)} runs, with their rollups")
    counts["gpu minutes"] = _write_rollups(plan, size, node_ids, raw_from)
    clock.phase("rollups", f"{counts['gpu minutes']} minute rollups")
    egress = [
        EgressRecord(run_id=run.pk, source_region=src, destination_region=dst, bytes=size_bytes, ts=ts)
        for run in plan.runs
        for src, dst, size_bytes, ts in run.egress
    ]
    EgressRecord.objects.bulk_create(egress, batch_size=BATCH)
    counts["egress records"] = len(egress)
    clock.phase("egress", f"{len(egress)} records for {sum(1 for r in plan.runs if r.egress)} cross-region runs")
    return counts


@functools.cache
def _password_hash(hasher: str, password: str) -> str:
    """One hash for every persona (they share the password): an Argon2 hash costs ~0.4 s.

    Keyed by the preferred hasher, so a settings change (tests use MD5) never reuses a hash
    the configured hashers cannot check, and by the password (one per workspace).
    """
    return make_password(password, hasher=get_hasher(hasher))


def _people(clock: PhaseClock) -> tuple[dict[str, Group], dict[str, User | None]]:
    """The demo teams and personas; an existing non-demo user of the same name is left alone."""
    password = _password_hash(get_hasher().algorithm, demo_password())
    groups = {team.name: Group.objects.get_or_create(name=team.name)[0] for team in TEAMS}
    users: dict[str, User | None] = {}
    for username, (first, last) in PEOPLE.items():
        user = User.objects.filter(username=username).first()
        if user is not None and not is_demo_user(user):
            clock.log(f"  note: user {username!r} already exists and is not a demo user: left as it is")
            users[username] = None
            continue
        if user is None:
            admin = username == ADMIN_USERNAME
            user = User.objects.create(
                username=username, email=demo_email(username), first_name=first, last_name=last,
                password=password, is_staff=admin, is_superuser=admin,
            )  # fmt: skip
        users[username] = user
    for team in TEAMS:
        groups[team.name].user_set.add(*[u for m in team.members if (u := users[m])])
    clock.phase("people", f"{len(groups)} teams, {sum(1 for u in users.values() if u)} users")
    return groups, users


def _write_runs(
    plan: DemoPlan, groups: dict[str, Group], users: dict[str, User | None]
) -> dict[tuple[int, int, int], int]:
    """Runs, attempts and nodes; sets each RunPlan's pk and returns node ids by (run, attempt, index)."""
    rows = [
        Run(
            source=r.source, external_id=r.external_id, team=groups[r.team], user=users.get(r.username),
            creator=demo_email(r.username), experiment_name=r.experiment_name, mlflow_run_id=r.mlflow_run_id,
            accelerator_type=r.accelerator_type, instance_type=r.instance_type, num_accelerators=r.num_accelerators,
            gpus_per_node=r.gpus_per_node, region=r.region, home_region=r.home_region, status=r.status,
            state_message=r.state_message, submitted_at=r.submitted_at, started_at=r.started_at,
            ended_at=r.ended_at, timeout_minutes=r.timeout_minutes, max_retries=r.max_retries,
            usage_policy_name=r.usage_policy_name, parameters=r.parameters, workload_yaml=r.workload_yaml,
            is_demo=True,
        )
        for r in plan.runs
    ]  # fmt: skip
    Run.objects.bulk_create(rows, batch_size=BATCH)
    # Read the ids back rather than trusting bulk_create to return them (older SQLite cannot).
    run_ids = dict(Run.objects.filter(is_demo=True).values_list("external_id", "pk"))
    for run in plan.runs:
        run.pk = run_ids[run.external_id]
    Attempt.objects.bulk_create(
        [
            Attempt(run_id=r.pk, number=a.number, status=a.status, started_at=a.started_at, ended_at=a.ended_at,
                    exit_code=a.exit_code, state_message=a.state_message, mlflow_run_id=a.mlflow_run_id)
            for r in plan.runs
            for a in r.attempts
        ],
        batch_size=BATCH,
    )  # fmt: skip
    attempt_ids = {
        (run_id, number): pk
        for run_id, number, pk in Attempt.objects.filter(run__is_demo=True).values_list("run_id", "number", "pk")
    }
    Node.objects.bulk_create(
        [
            Node(attempt_id=attempt_ids[r.pk, a.number], index=n.index, host=n.host, status=n.status,
                 started_at=a.started_at, ended_at=a.ended_at, exit_code=n.exit_code)
            for r in plan.runs
            for a in r.attempts
            for n in a.nodes
        ],
        batch_size=BATCH,
    )  # fmt: skip
    by_attempt = {pk: key for key, pk in attempt_ids.items()}
    nodes = Node.objects.filter(attempt__run__is_demo=True).values_list("attempt_id", "index", "pk")
    return {(*by_attempt[attempt_id], index): pk for attempt_id, index, pk in nodes}


def _ceil_minute(ts: datetime) -> datetime:
    floor = ts.replace(second=0, microsecond=0)
    return floor if floor == ts else floor + timedelta(minutes=1)


def _end(attempt: AttemptPlan, now: datetime) -> datetime:
    return attempt.ended_at or now


def _start(attempt: AttemptPlan) -> datetime:
    assert attempt.started_at is not None, "only a started attempt has telemetry"
    return attempt.started_at


def _write_logs(plan: DemoPlan, runs: list[RunPlan], node_ids: dict[tuple[int, int, int], int]) -> int:
    """Every node of every attempt of the given runs: a few chunks each, seq from 0."""
    chunks: list[LogChunk] = []
    for run in runs:
        for attempt in run.attempts:
            if not attempt.started_at:
                continue
            hosts = tuple(n.host for n in attempt.nodes)
            for node in attempt.nodes:
                rng = rng_for(plan.seed, "log", run.external_id, attempt.number, node.index)
                ctx = LogContext(
                    experiment=run.experiment.slug, family=run.experiment.family,
                    accelerator_type=run.accelerator_type or "GPU_1xA10", gpus_per_node=run.gpus_per_node,
                    hosts=hosts, node_index=node.index, attempt=attempt.number, start=attempt.started_at,
                    end=_end(attempt, plan.now), status=attempt.status, failure=attempt.failure,
                    failed_node=attempt.failed_node, failed_local_rank=attempt.failed_local_rank, curve=run.curve,
                    checkpoint_dir=checkpoint_dir(run.team, run.experiment_name, attempt.mlflow_run_id),
                    oom_alloc_gib=attempt.oom_alloc_gib, source=run.source,
                )  # fmt: skip
                node_id = node_ids[run.pk, attempt.number, node.index]
                for seq, text in enumerate(node_log(rng, ctx)):
                    chunks.append(LogChunk(node_id=node_id, seq=seq, text=text, line_count=text.count("\n")))
    LogChunk.objects.bulk_create(chunks, batch_size=500)
    logphrases.catch_up()  # advice's log evidence, as append_log_chunk notes it
    return len(chunks)


def _insert(model: type[Model], rows: list[dict[str, object]]) -> None:
    """INSERT plain rows (dicts by attname) with executemany: for the 50k-300k row tables.

    bulk_create spends ~200 us a row building model instances and preparing values field by
    field (most of a full seed); these models have no save() logic, so adapting each value
    once and letting the driver batch the statement writes the same rows ~10x faster, on
    SQLite and PostgreSQL alike.
    """
    if not rows:
        return
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    table = connection.ops.quote_name(model._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(cast(str, f.column)) for f in fields)  # concrete: a column each
    sql = f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"  # noqa: S608 - names from _meta
    # A field a row does not name gets its model default, as bulk_create would give it.
    adapters = [(f.attname, _adapter(f), f.get_default()) for f in fields]
    # A bar (stderr) only when the table takes several statements: the samples, minutes, points.
    bar = Progress(len(rows), str(model._meta.verbose_name_plural), label="   ") if len(rows) > 10 * BATCH else None
    with connection.cursor() as cursor:
        for start in range(0, len(rows), 10 * BATCH):
            batch = rows[start : start + 10 * BATCH]
            params: list[list[Any]] = [
                [adapt(row.get(name, default)) for name, adapt, default in adapters] for row in batch
            ]
            cursor.executemany(sql, params)
            if bar is not None:
                bar.advance(len(batch))
    if bar is not None:
        bar.close()


def _adapter(field: DjangoField) -> Callable[[Any], object]:
    if field.get_internal_type() == "DateTimeField":
        return connection.ops.adapt_datetimefield_value
    return _same


def _same(value: object) -> object:
    return value


def _write_metrics(plan: DemoPlan, runs: list[RunPlan]) -> int:
    """MLflow metrics of each run's last attempt (each retry logs to its own MLflow run)."""
    points: list[dict[str, object]] = []
    for run in runs:
        attempt = run.attempts[-1]
        if not attempt.started_at:
            continue
        rng = rng_for(plan.seed, "metrics", run.external_id)
        for p in metric_points(rng, run.curve, attempt.started_at, _end(attempt, plan.now), attempt.failure):
            points.append({"run_id": run.pk, "key": p.key, "step": p.step, "ts": p.ts, "value": p.value})
    _insert(MetricPoint, points)
    return len(points)


def _activity(plan: DemoPlan, run: RunPlan, attempt: AttemptPlan) -> Activity:
    return Activity.for_attempt(
        run.external_id, attempt.number, _start(attempt), _end(attempt, plan.now), attempt.failure
    )


def _write_samples(
    plan: DemoPlan, size: DemoSize, node_ids: dict[tuple[int, int, int], int]
) -> tuple[dict[int, datetime], int]:
    """1 Hz samples for the newest live or just-finished runs (a just-OOMed one first).

    Every node of the last attempt over the same last minutes (at most RAW_WINDOW), so that
    the total stays near `raw_sample_cap`; returns where each run's raw window starts
    (rollups stop there).
    """
    recent = [
        r for r in plan.runs
        if r.accelerator_type and r.attempts[-1].nodes and _end(r.attempts[-1], plan.now) >= plan.now - RECENT
    ]  # fmt: skip
    recent.sort(key=lambda r: (r.attempts[-1].failure != "cuda_oom", plan.now - _end(r.attempts[-1], plan.now)))
    chosen = recent[: size.telemetry_runs]
    raw_from: dict[int, datetime] = {}
    left, total = size.raw_sample_cap, 0
    for i, run in enumerate(chosen):
        attempt = run.attempts[-1]
        end = _end(attempt, plan.now)
        gpus = run.gpus_per_node
        seconds = min(RAW_WINDOW.total_seconds(), left // (len(chosen) - i) // (gpus * len(attempt.nodes)))
        # Start on a minute boundary, so the rollups written directly end where these begin.
        start = _ceil_minute(max(_start(attempt), end - timedelta(seconds=seconds)))
        if start >= end:
            continue
        activity = _activity(plan, run, attempt)
        samples = []
        for node in attempt.nodes:
            rng = rng_for(plan.seed, "samples", run.external_id, node.index)
            skew = node_skew(run.external_id, node.index)
            node_id = node_ids[run.pk, attempt.number, node.index]
            samples += [
                GpuSample(run_id=run.pk, node_id=node_id, gpu_index=gpu, ts=ts, source=TelemetrySource.DEMO, **fields)
                for gpu, ts, fields in raw_samples(rng, PROFILES[run.accelerator_type], activity, start, gpus, skew)
            ]
        store_gpu_samples(samples)
        raw_from[run.pk] = start
        left -= len(samples)
        total += len(samples)
    return raw_from, total


def _write_rollups(
    plan: DemoPlan, size: DemoSize, node_ids: dict[tuple[int, int, int], int], raw_from: dict[int, datetime]
) -> int:
    """Minute rollups for the newest runs' last attempt, every node over the same span, written directly.

    Featured runs come first and get their whole life: the running ones (the live demo
    continues them) and those with 1 Hz samples (the just-failed ones), newest first, at most
    FEATURED_SHARE % of `rollup_cap` between them. Then each other run gets an equal share of
    what is left, in rows, so a 64-GPU run covers fewer minutes than a single GPU; a long run
    keeps its last minutes, where failures happen.
    """
    runs = [r for r in plan.runs if r.accelerator_type and r.attempts[-1].nodes][: size.rollup_runs]
    is_featured = [r.attempts[-1].status == RunStatus.RUNNING or r.pk in raw_from for r in runs]
    featured = [r for r, yes in zip(runs, is_featured, strict=True) if yes]
    others = [r for r, yes in zip(runs, is_featured, strict=True) if not yes]
    left, written = size.rollup_cap, 0
    batch: list[dict[str, object]] = []
    for i, run in enumerate(featured + others):
        attempt = run.attempts[-1]
        width = run.gpus_per_node * len(attempt.nodes)  # rows a minute of the run costs
        if i < len(featured):
            minutes = (size.rollup_cap * FEATURED_SHARE // 100 - (size.rollup_cap - left)) // width
        else:
            minutes = left // (len(runs) - i) // width
        stop = raw_from.get(run.pk, _end(attempt, plan.now))
        first = max(_start(attempt).replace(second=0), stop - timedelta(minutes=minutes))
        if minutes < 1 or first >= stop:
            continue
        activity = _activity(plan, run, attempt)
        before = len(batch)
        for node in attempt.nodes:
            node_id = node_ids[run.pk, attempt.number, node.index]
            rng = rng_for(plan.seed, "rollups", run.external_id, node.index)
            skew = node_skew(run.external_id, node.index)
            profile = PROFILES[run.accelerator_type]
            for gpu, minute, agg in minute_rollups(rng, profile, activity, first, stop, run.gpus_per_node, skew):
                batch.append({"run_id": run.pk, "node_id": node_id, "gpu_index": gpu, "minute": minute, **agg})
        left -= len(batch) - before
        if len(batch) >= 20 * BATCH:  # flush now and then rather than hold 300k rows
            _insert(GpuMinute, batch)
            written += len(batch)
            batch = []
    _insert(GpuMinute, batch)
    return written + len(batch)
