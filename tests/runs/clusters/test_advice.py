"""Advice rules (runs/clusters/advice.py): each fires on a minimal case and stays quiet on its twin."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.models import AcceleratorPrice
from runs.choices import AcceleratorType, RunSource, RunStatus
from runs.clusters.advice import RULE_IDS, advise, findings_for
from runs.ingest import append_log_chunk
from runs.models import Cluster, GpuMinute, Node, Run
from runs.telemetry import utilization
from tests.conftest import T0, World, make_run

NOW = T0 + timedelta(days=1)
# advise() over a queryset with low-utilization runs and no clusters (see the test that pins it).
PAGE_PATH_QUERIES = 10


def cluster(world: World, cluster_id: str = "c-1", **fields: object) -> Cluster:
    defaults: dict[str, object] = {
        "name": cluster_id, "spark_version": "15.4.x-gpu-ml-scala2.12", "node_type_id": "g5.xlarge",
        "driver_node_type_id": "g5.xlarge", "data_security_mode": "SINGLE_USER", "runtime_engine": "STANDARD",
        "region": "us-west-2", "start_time": T0,
    }  # fmt: skip
    defaults.update(fields)
    return Cluster.objects.create(team=world.vision, cluster_id=cluster_id, **defaults)


def rules(runs: list[Run] | None = None, clusters: list[Cluster] | None = None) -> set[tuple[str, str]]:
    found = findings_for(runs or [], clusters or [], now=NOW)
    return {(f.rule, f.subject) for f in found}


def log(run: Run, text: str) -> None:
    """A chunk through the log write path, which notes its phrases (runs/failures/logphrases.py)."""
    node = Node.objects.select_related("attempt").get(attempt__run=run)
    append_log_chunk(run, node.attempt.number, node.index, 0, text)


def minutes(run: Run, count: int, util: float, gpus: int = 1) -> None:
    node = Node.objects.get(attempt__run=run)
    GpuMinute.objects.bulk_create(
        GpuMinute(run=run, node=node, gpu_index=g, minute=T0 + timedelta(minutes=m), utilization_gpu_avg=util,
                  utilization_gpu_max=util)
        for m in range(count)
        for g in range(gpus)
    )  # fmt: skip
    # Written directly, not by the rollup path: sum them into the run's summary as the seed does.
    utilization.rebuild([run.pk])


# --- Cluster rules --------------------------------------------------------------------------


def test_photon_on_gpu(world: World) -> None:
    photon = cluster(world, "photon", runtime_engine="PHOTON")
    by_version = cluster(world, "photon-ver", spark_version="15.4.x-photon-gpu-ml-scala2.12")
    cpu = cluster(world, "cpu", runtime_engine="PHOTON", node_type_id="i3.xlarge", driver_node_type_id="i3.xlarge")
    plain = cluster(world, "plain")
    found = rules(clusters=[photon, by_version, cpu, plain])
    assert ("photon_on_gpu", "photon") in found and ("photon_on_gpu", "photon-ver") in found
    assert ("photon_on_gpu", "cpu") not in found and ("photon_on_gpu", "plain") not in found


def test_custom_image_on_ml_runtime(world: World) -> None:
    ml = cluster(world, "ml-image", docker_image="me/img:1")
    standard = cluster(world, "std-image", docker_image="me/img:1", spark_version="15.4.x-gpu-scala2.12")
    found = rules(clusters=[ml, standard, cluster(world, "no-image")])
    assert {r for r in found if r[0] == "custom_image_on_ml_runtime"} == {("custom_image_on_ml_runtime", "ml-image")}


def test_uc_without_dedicated(world: World) -> None:
    shared_with_runs = cluster(world, "shared-runs", data_security_mode="USER_ISOLATION")
    make_run(world.vision, "r-shared", source=RunSource.CLASSIC, cluster=shared_with_runs)
    shared_uc = cluster(world, "shared-uc", data_security_mode="", raw={"query": "spark.table('main.vision.images')"})
    shared_idle = cluster(world, "shared-idle", data_security_mode="USER_ISOLATION")
    dedicated = cluster(world, "dedicated")
    make_run(world.vision, "r-ded", source=RunSource.CLASSIC, cluster=dedicated)
    found = {
        s
        for r, s in rules(clusters=[shared_with_runs, shared_uc, shared_idle, dedicated])
        if r == "uc_without_dedicated"
    }
    assert found == {"shared-runs", "shared-uc"}


def test_spark_conf_keys_are_not_three_level_names(world: World) -> None:
    conf = cluster(world, "conf", data_security_mode="USER_ISOLATION",
                   raw={"spark_conf": {"spark.databricks.cluster.profile": "singleNode"}})  # fmt: skip
    assert not rules(clusters=[conf])


def test_fgac_old_runtime(world: World) -> None:
    old = cluster(world, "old", spark_version="14.3.x-gpu-ml-scala2.12")
    run = make_run(world.vision, "r-old", source=RunSource.CLASSIC, cluster=old)
    log(run, "CREATE MATERIALIZED VIEW main.vision.daily AS ...\n")
    new = cluster(world, "new", spark_version="15.4.x-gpu-ml-scala2.12", raw={"note": "row filter on labels"})
    old_unused = cluster(world, "old-unused", spark_version="13.3.x-gpu-ml-scala2.12")
    found = {s for r, s in rules(clusters=[old, new, old_unused]) if r == "fgac_old_runtime"}
    assert found == {"old"}


# --- Run rules ------------------------------------------------------------------------------


def test_distributed_on_single_gpu_shape(world: World) -> None:
    torchrun = make_run(world.vision, "torchrun", accelerator_type=AcceleratorType.H100_1, num_accelerators=1,
                        gpus_per_node=1, workload_yaml="command: torchrun --nproc_per_node=8 train.py\n")  # fmt: skip
    count = make_run(world.vision, "count", accelerator_type=AcceleratorType.H100_1, num_accelerators=2,
                     gpus_per_node=1)  # fmt: skip
    deepspeed = make_run(world.vision, "deepspeed", accelerator_type=AcceleratorType.A10_1, num_accelerators=4,
                         gpus_per_node=1, workload_yaml="command: deepspeed train.py\n")  # fmt: skip
    fine = make_run(world.vision, "fine", workload_yaml="command: torchrun --nproc_per_node=8 train.py\n")
    sweep = make_run(world.vision, "sweep", accelerator_type=AcceleratorType.A10_1, num_accelerators=4,
                     gpus_per_node=1, workload_yaml="command: python sweep.py\n")  # fmt: skip
    found = {
        s for r, s in rules(runs=[torchrun, count, deepspeed, fine, sweep]) if r == "distributed_on_single_gpu_shape"
    }
    assert found == {"torchrun", "count", "deepspeed"}


def test_horovod_runner_and_databricks_genai(world: World) -> None:
    horovod = make_run(world.vision, "horovod")
    log(horovod, "hr = HorovodRunner(np=2)\n")
    genai = make_run(world.vision, "genai", parameters={"code": "from databricks_genai import finetuning"})
    genai_log = make_run(world.vision, "genai-log")
    log(genai_log, "ModuleNotFoundError: No module named 'databricks_genai'\n")
    clean = make_run(world.vision, "clean")
    log(clean, "TorchDistributor(num_processes=8).run(train)\n")
    found = rules(runs=[horovod, genai, genai_log, clean])
    assert {s for r, s in found if r == "horovod_runner"} == {"horovod"}
    assert {s for r, s in found if r == "databricks_genai"} == {"genai", "genai-log"}


def test_old_logs_are_not_searched(world: World) -> None:
    old = make_run(world.vision, "old", submitted_at=NOW - timedelta(days=40), started_at=NOW - timedelta(days=40),
                   ended_at=NOW - timedelta(days=39))  # fmt: skip
    log(old, "hr = HorovodRunner(np=2)\n")
    assert advise(now=NOW) == []


def test_dataset_as_argument(world: World) -> None:
    pickle = make_run(world.vision, "pickle")
    log(pickle, "OverflowError: cannot serialize a bytes object larger than 4 GiB\n")
    passed = make_run(
        world.vision,
        "passed",
        workload_yaml="command: python -c 'TorchDistributor(num_processes=8).run(train_fn, dataset)'\n",
    )
    kwargs = make_run(
        world.vision,
        "kwargs",
        workload_yaml="command: python -c 'TorchDistributor(num_processes=8).run(train_fn, lr=0.1)'\n",
    )
    found = {s for r, s in rules(runs=[pickle, passed, kwargs]) if r == "dataset_as_argument"}
    assert found == {"pickle", "passed"}


def test_low_util_multi_gpu(world: World) -> None:
    low = make_run(world.vision, "low")
    minutes(low, 20, 20.0, gpus=8)
    busy = make_run(world.vision, "busy")
    minutes(busy, 20, 90.0, gpus=8)
    single = make_run(
        world.vision, "single", accelerator_type=AcceleratorType.A10_1, num_accelerators=1, gpus_per_node=1
    )
    minutes(single, 20, 10.0)
    found = findings_for([low, busy, single], [], now=NOW)
    assert [(f.rule, f.subject) for f in found] == [("low_util_multi_gpu", "low")]
    assert "20%" in found[0].why and "on 2 GPUs" in found[0].why


def test_advise_page_path_matches_full_runs(world: World) -> None:
    """advise() names the window's runs by subquery and loads only RULE_FIELDS; its findings,
    the cost of a low-utilization run included, are those of the rules over whole runs."""
    # $2.50 an accelerator-hour, 8 accelerators for the run's hour: $20.00; on 2 GPUs $5.00.
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=T0 - timedelta(days=30), usd_per_hour="2.50"
    )
    low = make_run(world.vision, "low")
    minutes(low, 20, 20.0, gpus=8)
    busy = make_run(world.vision, "busy")
    minutes(busy, 20, 90.0, gpus=8)
    page = advise(Run.objects.filter(team=world.vision), Cluster.objects.none(), now=NOW)
    whole = findings_for(list(Run.objects.filter(team=world.vision)), [], now=NOW)
    assert [(f.rule, f.subject) for f in page] == [("low_util_multi_gpu", "low")]
    assert page == whole
    assert "about $5.00 instead of $20.00" in page[0].why
    # Pricing low runs loads them whole once: the queries do not grow with them.
    with CaptureQueriesContext(connection) as one:
        advise(Run.objects.filter(team=world.vision), Cluster.objects.none(), now=NOW)
    for name in ("low-2", "low-3"):
        minutes(make_run(world.vision, name), 20, 20.0, gpus=8)
    with CaptureQueriesContext(connection) as three:
        assert len(advise(Run.objects.filter(team=world.vision), Cluster.objects.none(), now=NOW)) == 3
    assert len(three.captured_queries) == len(one.captured_queries)


def every_run_rule(world: World, suffix: str) -> None:
    """A run each run rule fires on, and a twin that passes its SQL pre-filter but not the rule."""
    make_run(world.vision, f"torchrun{suffix}", accelerator_type=AcceleratorType.H100_1, num_accelerators=1,
             gpus_per_node=1, workload_yaml="command: torchrun --nproc_per_node=8 train.py\n")  # fmt: skip
    make_run(world.vision, f"count{suffix}", num_accelerators=12)
    make_run(world.vision, f"one-gpu{suffix}", accelerator_type=AcceleratorType.H100_1, num_accelerators=1,
             gpus_per_node=1, workload_yaml="command: torchrun --nproc_per_node=1 train.py\n")  # fmt: skip
    log(make_run(world.vision, f"horovod{suffix}"), "hr = HorovodRunner(np=2)\n")
    make_run(world.vision, f"genai{suffix}", parameters={"code": "from databricks_genai import finetuning"})
    spawn = "command: python -c 'TorchDistributor(num_processes=8).run(train_fn, {})'\n"
    make_run(world.vision, f"passed{suffix}", workload_yaml=spawn.format("dataset"))
    make_run(world.vision, f"kwargs{suffix}", workload_yaml=spawn.format("lr=0.1"))
    minutes(make_run(world.vision, f"low{suffix}"), 20, 20.0, gpus=8)
    minutes(make_run(world.vision, f"busy{suffix}"), 20, 90.0, gpus=8)
    start = NOW - timedelta(days=12)
    make_run(world.vision, f"cli-12d{suffix}", status=RunStatus.RUNNING, submitted_at=start, started_at=start,
             ended_at=None)  # fmt: skip
    ckpt = make_run(world.vision, f"ckpt-12d{suffix}", status=RunStatus.RUNNING, submitted_at=start,
                    started_at=start, ended_at=None)  # fmt: skip
    log(ckpt, "Saving checkpoint to /Volumes/x\n")
    make_run(world.vision, f"plain{suffix}")


def test_page_path_loads_only_candidates_and_finds_what_every_run_would(world: World) -> None:
    """advise() lets SQL pick each rule's candidate runs; the findings are those of every rule
    over every run, whichever rule fires, and its queries are a fixed number as findings grow."""
    every_run_rule(world, "")
    page = advise(Run.objects.filter(team=world.vision), Cluster.objects.none(), now=NOW)
    whole = findings_for(list(Run.objects.filter(team=world.vision)), [], now=NOW)
    assert page == whole
    assert {f.rule for f in page} == {
        "distributed_on_single_gpu_shape", "horovod_runner", "databricks_genai", "dataset_as_argument",
        "low_util_multi_gpu", "no_checkpoint_near_cap",
    }  # fmt: skip
    assert {f.subject for f in page} == {"torchrun", "count", "horovod", "genai", "passed", "low", "cli-12d"}
    with CaptureQueriesContext(connection) as one:
        advise(Run.objects.filter(team=world.vision), Cluster.objects.none(), now=NOW)
    every_run_rule(world, "-2")
    with CaptureQueriesContext(connection) as two:
        page = advise(Run.objects.filter(team=world.vision), Cluster.objects.none(), now=NOW)
    assert len(page) == 14
    assert page == findings_for(list(Run.objects.filter(team=world.vision)), [], now=NOW)
    # The unnoted chunks (none), the noted log phrases, the utilization summaries, the low runs
    # loaded whole, the cost engine's five (attempts, prices, egress, attempts, minutes), the
    # candidate runs: as many with twice the findings.
    assert len(two.captured_queries) == len(one.captured_queries) == PAGE_PATH_QUERIES


def test_no_checkpoint_near_cap(world: World) -> None:
    def long_run(name: str, days: float, **fields: object) -> Run:
        start = NOW - timedelta(days=days)
        return make_run(world.vision, name, status=RunStatus.RUNNING, submitted_at=start, started_at=start,
                        ended_at=None, **fields)  # fmt: skip

    cli = long_run("cli-12d", 12)
    with_ckpt = long_run("ckpt-12d", 12)
    log(with_ckpt, "Saving checkpoint to /Volumes/x\n")
    short = long_run("cli-6d", 6)
    notebook = long_run("nb-6d", 6, parameters={"notebook_path": "/Users/alice/train"})
    found = {s for r, s in rules(runs=[cli, with_ckpt, short, notebook]) if r == "no_checkpoint_near_cap"}
    assert found == {"cli-12d", "nb-6d"}


# --- The command -----------------------------------------------------------------------------


def test_advise_json_shape_and_team_filter(world: World) -> None:
    cluster(world, "vision-photon", runtime_engine="PHOTON")
    Cluster.objects.create(team=world.nlp, cluster_id="nlp-photon", name="nlp-photon", runtime_engine="PHOTON",
                           node_type_id="p5.48xlarge", spark_version="15.4.x-gpu-ml-scala2.12",
                           data_security_mode="SINGLE_USER")  # fmt: skip
    out = StringIO()
    call_command("advise", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert {tuple(sorted(d)) for d in data} == {("fix", "rule", "subject", "subject_id", "subject_type", "why")}
    assert {d["subject"] for d in data} == {"vision-photon", "nlp-photon"}
    assert all(d["rule"] in RULE_IDS for d in data)
    out = StringIO()
    call_command("advise", "--json", "--team", "nlp", stdout=out)
    assert [d["subject"] for d in json.loads(out.getvalue())] == ["nlp-photon"]
    text = StringIO()
    call_command("advise", "--team", "vision", stdout=text)
    assert "[photon_on_gpu] cluster vision-photon" in text.getvalue()


@pytest.mark.django_db
def test_advise_unknown_team_fails() -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError):
        call_command("advise", "--team", "nobody")
