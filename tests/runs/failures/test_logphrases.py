"""runs.failures.logphrases: the log write path notes advice's phrases, so the advice page never reads log text."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.clusters.advice import advise
from runs.failures.logphrases import catch_up, kinds_in
from runs.ingest import append_log_chunk
from runs.models import Cluster, LogChunk, LogPhrase, Node, Run
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db
NOW = T0 + timedelta(days=1)


def test_kinds_are_matched_case_insensitively() -> None:
    assert kinds_in("Saving CHECKPOINT to /Volumes/x; from sparkdl import HorovodRunner") == {"checkpoint", "horovod"}
    assert kinds_in("epoch 3 loss 0.41") == set()


def test_the_write_path_notes_each_kind_once(world: World) -> None:
    run = make_run(world.vision)
    for seq in range(3):
        append_log_chunk(run, 1, 0, seq, f"step {seq}: torch.save(model) to checkpoint-{seq}\n")
    append_log_chunk(run, 1, 0, 1, "step 1: torch.save(model) to checkpoint-1\n")  # a resend
    assert list(LogPhrase.objects.values_list("run__external_id", "kind")) == [("run-1", "checkpoint")]
    assert not LogChunk.objects.filter(phrases_noted=False).exists()


def test_chunks_written_around_the_path_are_caught_up(world: World) -> None:
    run = make_run(world.vision, "horovod")
    node = Node.objects.get(attempt__run=run)
    LogChunk.objects.bulk_create([LogChunk(node=node, seq=0, text="HorovodRunner(np=8).run(train)\n")])
    findings = advise(Run.objects.all(), Cluster.objects.none(), now=NOW)
    assert [f.rule for f in findings] == ["horovod_runner"]
    assert catch_up() == 0


def test_advice_reads_no_log_text_and_the_same_queries_with_ten_times_the_logs(world: World) -> None:
    run = make_run(world.vision, "ckpt")
    append_log_chunk(run, 1, 0, 0, "HorovodRunner started\n")
    with CaptureQueriesContext(connection) as small:
        first = advise(Run.objects.all(), Cluster.objects.none(), now=NOW)
    for seq in range(1, 40):
        append_log_chunk(run, 1, 0, seq, "step loss 0.1 checkpoint saved\n" * 200)
    with CaptureQueriesContext(connection) as large:
        second = advise(Run.objects.all(), Cluster.objects.none(), now=NOW)
    assert [f.rule for f in first] == [f.rule for f in second] == ["horovod_runner"]
    assert len(small.captured_queries) == len(large.captured_queries)
    # The only query on the chunks is the catch-up's, and it reads only chunks not yet noted (none).
    on_chunks = [q["sql"] for q in large.captured_queries if "runs_logchunk" in q["sql"]]
    assert len(on_chunks) == 1 and "phrases_noted" in on_chunks[0]
