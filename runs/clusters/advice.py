"""Configuration advice: small rules over clusters and runs, each a finding with why and fix.

Every rule is a plain function of a model instance and the `Evidence` gathered for it, and
returns a `Finding` or None; `advise()` gathers the evidence in a bounded number of queries
and runs every rule. Rule ids are stable: tests, the `advise` command's JSON and the page
use them.

Evidence from logs is bounded: only runs submitted in the last `WINDOW` (or still active)
are looked at, and the phrases their logs hold are noted as the logs are written
(runs/failures/logphrases.py, `LogPhrase` rows): the page reads those rows, never the logs' text.

Heuristics, documented here because they decide what fires:

- uc_without_dedicated: an ML-runtime cluster that is not in dedicated (single-user) access
  mode and either shows Unity Catalog evidence (a quoted three-level `catalog.schema.table`
  name or "unity catalog" in its record or its runs' workloads, or "unity catalog" in their
  logs) or simply has runs: ML runtime clusters need dedicated access mode for Unity Catalog.
- fgac_old_runtime: a dedicated cluster on a runtime older than 15.4 whose record, workloads
  or logs mention row filters, column masks, fine-grained access, streaming tables or
  materialized views.
- no_checkpoint_near_cap: the run's runtime cap (`Run.runtime_cap`: 7 days for notebook runs,
  14 for CLI runs). Classic runs have no such cap and are skipped.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, localcontext
from typing import Any

from django.db.models import Count, F, Q, QuerySet, TextField
from django.db.models.functions import Cast, Mod
from django.db.models.lookups import Exact
from django.utils import timezone

from billing.engine import breakdowns_for_runs, format_usd, to_cents
from runs.choices import GPUS_PER_NODE, AcceleratorType, RunSource, RunStatus, accelerator_count_problem
from runs.clusters.facts import DEDICATED_MODES, is_gpu_instance, is_ml_runtime, is_photon, runtime_version
from runs.failures.logphrases import LOG_PHRASES, catch_up
from runs.models import CLI_RUNTIME_CAP, NOTEBOOK_RUNTIME_CAP, Cluster, LogPhrase, Run, RunUtilization, mean_utilization

WINDOW = timedelta(days=30)
LOW_UTIL_PERCENT = 40.0
# A run needs this many GPU-minutes before its mean utilization says anything.
LOW_UTIL_MIN_MINUTES = 10
NEAR_CAP = 0.8
FGAC_MIN_RUNTIME = (15, 4)

# GPUs per node of each serverless shape, by its value: `AcceleratorType.values` builds a new
# list on every call, and this rule runs for every run in the window (~8,000 at 100,000 runs).
_SHAPES = {shape.value: GPUS_PER_NODE[shape] for shape in AcceleratorType}

# Quoted three-level names like "main.vision.images", not Spark/Hadoop configuration keys.
_THREE_LEVEL = re.compile(
    r"""["'`](?!spark\.|fs\.|hadoop\.|databricks\.|io\.|org\.|com\.)[A-Za-z_]\w*\.\w+\.\w+["'`]"""
)
_NPROC = re.compile(r"--nproc[_-]per[_-]node[= ](\d+)")
_NNODES = re.compile(r"--(?:nnodes|num_nodes|num_machines|num-nodes)[= ](\d+)")
_DISTRIBUTED = re.compile(r"torchrun|torch\.distributed|deepspeed|fsdp|accelerate launch|TorchDistributor", re.I)
# TorchDistributor(...).run(train_fn, dataset): a positional argument after the function.
_RUN_WITH_ARG = re.compile(r"\.run\(\s*[A-Za-z_]\w*\s*,\s*[A-Za-z_]\w*\s*[,)]")


@dataclass(frozen=True)
class Finding:
    """One piece of advice about one cluster or run."""

    rule: str
    subject_type: str
    subject_id: int
    subject: str
    why: str
    fix: str
    team: str = field(default="", compare=False)

    def as_json(self) -> dict[str, object]:
        """The command's JSON shape: {rule, subject_type, subject_id, subject, why, fix}."""
        data = asdict(self)
        data.pop("team")
        return data


@dataclass
class Evidence:
    """What the rules know beyond the instance: log hits, telemetry, runs per cluster, cost."""

    now: datetime
    log_hits: dict[str, set[int]] = field(default_factory=dict)
    cluster_log_hits: dict[str, set[int]] = field(default_factory=dict)
    mean_util: dict[int, tuple[float, int]] = field(default_factory=dict)
    cluster_runs: dict[int, int] = field(default_factory=dict)
    cluster_texts: dict[int, str] = field(default_factory=dict)
    run_cost: dict[int, Decimal] = field(default_factory=dict)

    def logged(self, kind: str, run: Run) -> bool:
        return run.pk in self.log_hits.get(kind, set())


def _cluster_finding(cluster: Cluster, rule: str, why: str, fix: str) -> Finding:
    label = cluster.name or cluster.cluster_id
    return Finding(rule, "cluster", cluster.pk, label, why, fix, cluster.team.name)


def _run_finding(run: Run, rule: str, why: str, fix: str) -> Finding:
    return Finding(rule, "run", run.pk, run.external_id, why, fix, run.team.name)


def run_text(run: Run) -> str:
    """What a run was asked to do: its workload YAML and parameters, as one searchable text.

    Kept on the instance: several rules read it, and at ~8,000 runs in the window the JSON
    dumps were a tenth of the advice page.
    """
    text = run.__dict__.get("_advice_text")
    if text is None:
        text = run.__dict__["_advice_text"] = f"{run.workload_yaml}\n{json.dumps(run.parameters or {}, sort_keys=True)}"
    return text


# --- Cluster rules ------------------------------------------------------------------------


def photon_on_gpu(cluster: Cluster, evidence: Evidence) -> Finding | None:
    """Photon asked for on a GPU instance type."""
    if not (is_photon(cluster) and is_gpu_instance(cluster.node_type_id)):
        return None
    return _cluster_finding(
        cluster, "photon_on_gpu",
        f"Photon is enabled on GPU instance type {cluster.node_type_id}: Photon does not support GPU instance "
        "types, and PyTorch, TensorFlow and Python XGBoost gain nothing from it.",
        "Set runtime_engine to STANDARD and pick the plain GPU ML runtime (no '-photon-' in the version).",
    )  # fmt: skip


def custom_image_on_ml_runtime(cluster: Cluster, evidence: Evidence) -> Finding | None:
    """A custom container image on a GPU cluster that asks for the ML runtime."""
    gpu = is_gpu_instance(cluster.node_type_id) or "gpu" in (cluster.spark_version or "").lower()
    if not (cluster.docker_image and gpu and is_ml_runtime(cluster)):
        return None
    return _cluster_finding(
        cluster, "custom_image_on_ml_runtime",
        f"Custom image {cluster.docker_image} on ML runtime {cluster.spark_version}: custom GPU container "
        "images are not supported on the ML runtime.",
        "Use a standard runtime with the custom image, built from the official Databricks CUDA images; or drop "
        "the image and install packages on the ML runtime.",
    )  # fmt: skip


def uc_without_dedicated(cluster: Cluster, evidence: Evidence) -> Finding | None:
    """An ML-runtime cluster reading Unity Catalog (or with runs) not in dedicated access mode."""
    if not is_ml_runtime(cluster) or (cluster.data_security_mode or "").upper() in DEDICATED_MODES:
        return None
    text = evidence.cluster_texts.get(cluster.pk, "")
    uc = (
        bool(_THREE_LEVEL.search(text))
        or "unity catalog" in text.lower()
        or cluster.pk in evidence.cluster_log_hits.get("unity_catalog", set())
    )
    runs = evidence.cluster_runs.get(cluster.pk, 0)
    if not (uc or runs):
        return None
    seen = "reads Unity Catalog data" if uc else f"has {runs} run{'s' if runs != 1 else ''}"
    mode = cluster.data_security_mode or "no access mode"
    return _cluster_finding(
        cluster, "uc_without_dedicated",
        f"ML runtime cluster in {mode} {seen}: the ML runtime reads Unity Catalog data only in dedicated "
        "(single-user) access mode.",
        "Set the access mode to dedicated (SINGLE_USER), assigned to a user or a group.",
    )  # fmt: skip


def fgac_old_runtime(cluster: Cluster, evidence: Evidence) -> Finding | None:
    """Fine-grained access control / streaming tables / MVs on a dedicated runtime older than 15.4."""
    version = runtime_version(cluster)
    dedicated = (cluster.data_security_mode or "").upper() in DEDICATED_MODES
    if version is None or version >= FGAC_MIN_RUNTIME or not dedicated:
        return None
    text = evidence.cluster_texts.get(cluster.pk, "").lower()
    used = any(p in text for p in LOG_PHRASES["fgac"]) or cluster.pk in evidence.cluster_log_hits.get("fgac", set())
    if not used:
        return None
    return _cluster_finding(
        cluster, "fgac_old_runtime",
        f"Runtime {cluster.spark_version} in dedicated mode queries row filters, column masks, streaming tables "
        "or materialized views: on dedicated compute that needs 15.4 LTS ML or above.",
        "Move the cluster to 15.4 LTS ML (or a later LTS).",
    )  # fmt: skip


CLUSTER_RULES: tuple[Callable[[Cluster, Evidence], Finding | None], ...] = (
    photon_on_gpu, custom_image_on_ml_runtime, uc_without_dedicated, fgac_old_runtime,
)  # fmt: skip


# --- Run rules ----------------------------------------------------------------------------


def distributed_on_single_gpu_shape(run: Run, evidence: Evidence) -> Finding | None:
    """Distributed training asked of a single-GPU shape, or a count that does not fit the shape."""
    shape = run.accelerator_type
    if shape not in _SHAPES:
        return None
    problem = accelerator_count_problem(shape, run.num_accelerators)
    if not problem and _SHAPES[shape] == 1:
        text = run_text(run)
        nproc = max((int(n) for n in _NPROC.findall(text)), default=1)
        nnodes = max((int(n) for n in _NNODES.findall(text)), default=1)
        if nproc > 1:
            problem = f"the command starts {nproc} processes a node (--nproc_per_node) on {shape}"
        elif nnodes > 1:
            problem = f"the command asks for {nnodes} nodes on {shape}"
        elif run.num_accelerators > 1 and _DISTRIBUTED.search(text):
            problem = f"distributed training over {run.num_accelerators} x {shape}"
    if not problem:
        return None
    return _run_finding(
        run, "distributed_on_single_gpu_shape",
        f"{problem}: multi-GPU distributed training runs only on the 8-GPU shapes.",
        "Use GPU_8xH100 (or GPU_8xB300) with num_accelerators a multiple of 8, or train on one GPU.",
    )  # fmt: skip


def horovod_runner(run: Run, evidence: Evidence) -> Finding | None:
    """HorovodRunner in the code or the logs."""
    if not ("horovodrunner" in run_text(run).lower() or evidence.logged("horovod", run)):
        return None
    return _run_finding(
        run, "horovod_runner",
        "The run uses HorovodRunner, which is deprecated and being removed.",
        "Move to TorchDistributor (pyspark.ml.torch.distributor), the supported path for distributed training.",
    )  # fmt: skip


def databricks_genai(run: Run, evidence: Evidence) -> Finding | None:
    """The run imports databricks_genai (Foundation Model Fine-tuning)."""
    if not ("databricks_genai" in run_text(run) or evidence.logged("genai", run)):
        return None
    return _run_finding(
        run, "databricks_genai",
        "The run imports databricks_genai: Foundation Model Fine-tuning has reached end of life.",
        "Write the training loop as ordinary PyTorch (or Hugging Face) code on serverless GPUs.",
    )  # fmt: skip


def dataset_as_argument(run: Run, evidence: Evidence) -> Finding | None:
    """A dataset passed as an argument to the distributed function (pickle limits in the logs)."""
    text = run_text(run)
    passed = "distributor" in text.lower() and bool(_RUN_WITH_ARG.search(text))
    if not (passed or evidence.logged("serialize", run)):
        return None
    seen = "the command passes data to TorchDistributor.run" if passed else "the logs show serialization limits"
    return _run_finding(
        run, "dataset_as_argument",
        f"{seen.capitalize()}: an argument to the distributed function is pickled to every worker, which costs "
        "time and hits size limits (4 GiB pickles, spark.driver.maxResultSize).",
        "Load the dataset inside the function (from a table, volume or path) and pass only its location.",
    )  # fmt: skip


def low_util_multi_gpu(run: Run, evidence: Evidence) -> Finding | None:
    """A multi-GPU run whose mean per-GPU utilization stayed under LOW_UTIL_PERCENT."""
    mean, count = evidence.mean_util.get(run.pk, (None, 0))
    if run.num_accelerators <= 1 or mean is None or count < LOW_UTIL_MIN_MINUTES or mean >= LOW_UTIL_PERCENT:
        return None
    fewer = fewer_gpus(run.num_accelerators, mean)
    why = f"Mean GPU utilization was {mean:.0f}% over {run.num_accelerators} GPUs"
    cost = evidence.run_cost.get(run.pk)
    if cost is not None and fewer < run.num_accelerators:
        was, would = format_usd(cost), format_usd(scaled(cost, fewer, run.num_accelerators))
        gpus = f"{fewer} GPU{'s' if fewer != 1 else ''}"
        why += f"; on {gpus} it would have cost about {would} instead of {was}"
    return _run_finding(
        run, "low_util_multi_gpu", why + ".",
        "Train on a single machine (or fewer GPUs) when possible; fix the input pipeline before adding GPUs.",
    )  # fmt: skip


def fewer_gpus(current: int, mean_util: float) -> int:
    """GPUs that would carry the same work at ~80% utilization, at least 1."""
    return max(1, min(current, math.ceil(current * mean_util / 80.0)))


def scaled(cost: Decimal, fewer: int, current: int) -> Decimal:
    """cost x fewer / current to the cent as every page rounds (money.to_cents); shown, never added up."""
    with localcontext() as ctx:
        ctx.prec = 60
        return to_cents(cost * fewer / current)


def no_checkpoint_near_cap(run: Run, evidence: Evidence) -> Finding | None:
    """A serverless run past NEAR_CAP of its runtime cap with no checkpoint in its logs."""
    if run.source != RunSource.SERVERLESS or run.started_at is None:
        return None
    elapsed = (run.ended_at or evidence.now) - run.started_at
    cap = run.runtime_cap
    if elapsed < cap * NEAR_CAP or evidence.logged("checkpoint", run):
        return None
    return _run_finding(
        run, "no_checkpoint_near_cap",
        f"The run has gone {elapsed.days} days of a {cap.days}-day cap with no checkpoint in its logs: "
        "at the cap it stops, and everything since the start is lost.",
        "Save checkpoints regularly (torch.save / save_pretrained to a volume) and resume from the last one.",
    )  # fmt: skip


def text_mentions(*phrases: str) -> Q:
    """Runs whose `run_text` may hold one of the phrases (case-insensitively): its SQL twin.

    The workload YAML and the parameters' JSON as the database writes it (`_advice_params`, the
    alias `findings_for` adds); a phrase of letters, digits, `-`, `_` or `.` reads the same in
    either JSON, so every run whose text holds it is matched.
    """
    match = Q()
    for phrase in phrases:
        match |= Q(workload_yaml__icontains=phrase) | Q(_advice_params__icontains=phrase)
    return match


def rule_candidates(evidence: Evidence) -> dict[str, Q]:
    """Per run rule, a filter every run it can fire on passes (most runs pass none).

    The rules stay the judges: these only spare building and testing the ~8,000 window runs
    (at 100,000 runs) that no rule can fire on, so each must hold whatever its rule reads to
    fire. A rule missing here is run over every run in the window.
    """
    hits = evidence.log_hits
    per_node_q = Q()
    single = []
    for shape, per_node in _SHAPES.items():
        if per_node == 1:
            single.append(shape)
        else:  # accelerator_count_problem: whole nodes only
            per_node_q |= Q(accelerator_type=shape) & ~Q(Exact(Mod("num_accelerators", per_node), 0))
    low = [pk for pk, (mean, _) in evidence.mean_util.items() if mean is not None and mean < LOW_UTIL_PERCENT]
    shortest_cap = min(NOTEBOOK_RUNTIME_CAP, CLI_RUNTIME_CAP) * NEAR_CAP
    launcher = text_mentions("--nproc", "--nnodes", "--num_nodes", "--num_machines", "--num-nodes")
    distributed = (
        per_node_q
        | Q(accelerator_type=AcceleratorType.H100_1) & ~Q(num_accelerators=1)
        | Q(accelerator_type__in=single) & (Q(num_accelerators__gt=1) | launcher)
    )
    return {
        "distributed_on_single_gpu_shape": distributed,
        "horovod_runner": text_mentions("horovodrunner") | Q(pk__in=hits.get("horovod", set())),
        "databricks_genai": text_mentions("databricks_genai") | Q(pk__in=hits.get("genai", set())),
        "dataset_as_argument": text_mentions("distributor") | Q(pk__in=hits.get("serialize", set())),
        "low_util_multi_gpu": Q(num_accelerators__gt=1, pk__in=low),
        "no_checkpoint_near_cap": Q(source=RunSource.SERVERLESS, started_at__lte=evidence.now - shortest_cap)
        & (Q(ended_at__isnull=True) | Q(ended_at__gte=F("started_at") + shortest_cap)),
    }


RUN_RULES: tuple[Callable[[Run, Evidence], Finding | None], ...] = (
    distributed_on_single_gpu_shape, horovod_runner, databricks_genai, dataset_as_argument,
    low_util_multi_gpu, no_checkpoint_near_cap,
)  # fmt: skip
# The run fields the run rules and their findings read: `advise` loads only these.
RULE_FIELDS = (
    "external_id", "team__name", "source", "accelerator_type", "num_accelerators", "workload_yaml", "parameters",
    "started_at", "ended_at",
)  # fmt: skip
RULE_IDS = tuple(rule.__name__ for rule in CLUSTER_RULES + RUN_RULES)
# What each rule finds, as a heading for people; the rule id stays the stable key (CSV, JSON, anchors).
RULE_TITLES = {
    "photon_on_gpu": "Photon asked for on a GPU instance type",
    "custom_image_on_ml_runtime": "Custom container image on an ML-runtime GPU cluster",
    "uc_without_dedicated": "ML-runtime cluster not in dedicated access mode",
    "fgac_old_runtime": "Fine-grained access control on a dedicated runtime older than 15.4",
    "distributed_on_single_gpu_shape": "Distributed training asked of a single-GPU shape",
    "horovod_runner": "HorovodRunner in the code or logs",
    "databricks_genai": "Foundation Model Fine-tuning (databricks_genai) imported",
    "dataset_as_argument": "Dataset passed as an argument to the distributed function",
    "low_util_multi_gpu": "Multi-GPU run with low GPU utilization",
    "no_checkpoint_near_cap": "Near its runtime cap with no checkpoint",
}


# --- Gathering evidence and running the rules ----------------------------------------------


def recent_runs(runs: QuerySet[Run], now: datetime) -> QuerySet[Run]:
    """The runs rules look at: submitted within WINDOW, or still active."""
    return runs.filter(Q(submitted_at__gte=now - WINDOW) | Q(status__in=RunStatus.active()))


def gather(runs: list[Run], clusters: list[Cluster], now: datetime, run_query: QuerySet[Run] | None = None) -> Evidence:
    """Evidence for the given runs and clusters in a bounded number of queries.

    1. The log phrases noted for the runs (and the clusters' runs) on the write path, two queries.
    2. One query for the mean utilization of multi-GPU runs, from their `RunUtilization` summaries.
    3. One query counting runs per cluster; cluster texts from their record and runs' workloads.
    4. The cost of the low-utilization runs, through the cost engine (a constant number of queries).

    `run_query`, when given, is the queryset `runs` came from: the queries then name the runs by
    that subquery instead of sending thousands of ids (at 100,000 runs the window holds ~8,000,
    and binding and planning their ids was a third of the advice page's time).
    """
    evidence = Evidence(now=now)
    # A subquery or the ids: either is what `__in` takes.
    ids: Iterable[Any] = run_query.values("pk") if run_query is not None else [r.pk for r in runs]
    cluster_ids = [c.pk for c in clusters]
    # The log phrases ingest noted (runs/failures/logphrases.py): rows per run and kind, never the logs' text.
    catch_up()
    evidence.log_hits = {kind: set() for kind in LOG_PHRASES}
    for kind, run_id in LogPhrase.objects.filter(run_id__in=ids).values_list("kind", "run_id"):
        evidence.log_hits.setdefault(kind, set()).add(run_id)
    evidence.cluster_log_hits = {kind: set() for kind in ("unity_catalog", "fgac")}
    for kind, cluster_id in (
        LogPhrase.objects.filter(kind__in=list(evidence.cluster_log_hits), run__cluster_id__in=cluster_ids)
        .values_list("kind", "run__cluster_id")
        .distinct()
    ):
        evidence.cluster_log_hits[kind].add(cluster_id)
    multi: Iterable[Any] = (
        run_query.filter(num_accelerators__gt=1).values("pk")
        if run_query is not None
        else [r.pk for r in runs if r.num_accelerators > 1]
    )
    # The mean of the runs' minute rollups, kept per run by the rollup path (runs.telemetry.utilization).
    rows = RunUtilization.objects.filter(run_id__in=multi, gpu_minutes__gt=0).values_list(
        "run_id", "gpu_minutes", "utilization_sum"
    )
    # gpu_minutes > 0, so every mean is a number.
    evidence.mean_util = {pk: (mean, n) for pk, n, total in rows if (mean := mean_utilization(n, total)) is not None}
    counts = Run.objects.filter(cluster_id__in=cluster_ids).values("cluster_id").annotate(n=Count("id"))
    evidence.cluster_runs = {row["cluster_id"]: row["n"] for row in counts}
    texts: dict[int, list[str]] = defaultdict(list)
    for cluster in clusters:
        texts[cluster.pk].append(json.dumps(cluster.raw or {}, sort_keys=True))
    for cluster_id, yaml_text, params in Run.objects.filter(
        cluster_id__in=cluster_ids, submitted_at__gte=now - WINDOW
    ).values_list("cluster_id", "workload_yaml", "parameters"):
        texts[cluster_id].append(f"{yaml_text}\n{json.dumps(params or {}, sort_keys=True)}")
    evidence.cluster_texts = {pk: "\n".join(parts) for pk, parts in texts.items()}
    if run_query is not None:  # the runs are not loaded yet: the low ones are those of the summaries
        low_ids = [pk for pk, (mean, _) in evidence.mean_util.items() if mean is not None and mean < LOW_UTIL_PERCENT]
        low = list(Run.objects.filter(pk__in=low_ids)) if low_ids else []
    else:
        low = [r for r in runs if r.pk in evidence.mean_util and evidence.mean_util[r.pk][0] < LOW_UTIL_PERCENT]
    if any(r.get_deferred_fields() for r in low):
        # The rules read a few fields (RULE_FIELDS); the cost engine reads the whole run.
        low = list(Run.objects.filter(pk__in=[r.pk for r in low]))
    if low:
        evidence.run_cost = {pk: b.total for pk, b in breakdowns_for_runs(low, now=now).items()}
    return evidence


def findings_for(runs: Iterable[Run], clusters: Iterable[Cluster], now: datetime | None = None) -> list[Finding]:
    """Every rule over the given runs and clusters; findings ordered by rule, then subject.

    Given a queryset, the evidence names its runs by subquery and only the runs some rule can
    fire on (`rule_candidates`) are loaded: the same findings as every rule over every run.
    """
    now = now or timezone.now()
    clusters = list(clusters)
    if isinstance(runs, QuerySet):
        evidence = gather([], clusters, now, runs)
        matches = rule_candidates(evidence)
        candidates = Q()
        for match in matches.values():
            candidates |= match
        if set(matches) != {rule.__name__ for rule in RUN_RULES}:
            candidates = Q()  # a rule without its pre-filter sees every run
        runs = list(runs.alias(_advice_params=Cast("parameters", TextField())).filter(candidates))
    else:
        runs = list(runs)
        evidence = gather(runs, clusters, now)
    found = [f for c in clusters for rule in CLUSTER_RULES if (f := rule(c, evidence))]
    found += [f for r in runs for rule in RUN_RULES if (f := rule(r, evidence))]
    order = {rule: i for i, rule in enumerate(RULE_IDS)}
    return sorted(found, key=lambda f: (order[f.rule], f.team, f.subject))


def advise(
    runs: QuerySet[Run] | None = None, clusters: QuerySet[Cluster] | None = None, now: datetime | None = None
) -> list[Finding]:
    """Findings for the given (already scoped) querysets, or for everything; runs bounded to WINDOW."""
    now = now or timezone.now()
    runs = runs if runs is not None else Run.objects.all()
    clusters = clusters if clusters is not None else Cluster.objects.all()
    runs = recent_runs(runs, now).select_related("team").only(*RULE_FIELDS)
    return findings_for(runs, clusters.select_related("team"), now=now)
