"""The log source: tailing `<run>/<attempt>/<node>.log` files, and the per-node log command."""

from __future__ import annotations

import os
import shlex
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from runs.choices import RunEventKind, RunStatus
from runs.collectors import logsource
from runs.models import CollectorState, LogChunk, Run, RunEvent
from tests.conftest import World, make_run


def collect() -> str:
    out = StringIO()
    call_command("collect", "logs", "--once", stdout=out)
    return out.getvalue()


def stored(run: Run, attempt: int = 1, node: int = 0) -> str:
    chunks = LogChunk.objects.filter(node__attempt__run=run, node__attempt__number=attempt, node__index=node)
    return "".join(chunks.order_by("seq").values_list("text", flat=True))


@pytest.fixture
def running(world: World) -> Run:
    return make_run(world.vision, "1001", status=RunStatus.RUNNING, ended_at=None)


def write(path: Path, data: bytes | str, mode: str = "ab") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open(mode) as handle:
        handle.write(data.encode() if isinstance(data, str) else data)


def test_files_are_tailed_by_complete_lines_and_a_resend_stores_nothing(logs: Path, running: Run) -> None:
    log = logs / "1001" / "1" / "0.log"
    write(log, "epoch 1 loss 2.31\nepoch 2 loss 1.97\nepoch 3 lo")

    assert "logs: 1 file(s), 1 chunk(s), 2 line(s) stored" in collect()
    assert stored(running) == "epoch 1 loss 2.31\nepoch 2 loss 1.97\n"

    write(log, "ss 1.52\nepoch 4 loss 1.20\nepoch 5")
    assert "logs: 1 file(s), 1 chunk(s), 2 line(s) stored" in collect()
    assert stored(running) == "epoch 1 loss 2.31\nepoch 2 loss 1.97\nepoch 3 loss 1.52\nepoch 4 loss 1.20\n"
    assert list(LogChunk.objects.values_list("seq", flat=True)) == [0, 1]

    assert "logs: 1 file(s), 0 chunk(s), 0 line(s) stored" in collect()
    # A lost cursor (or a resend of the whole file) stores no line twice.
    CollectorState.objects.filter(name="logs").update(cursor={})
    collect()
    assert LogChunk.objects.count() == 2
    assert CollectorState.objects.get(name="logs").cursor["files"]["1001/1/0.log"]["offset"] == len(stored(running))


def test_each_attempt_and_node_gets_its_own_log(logs: Path, running: Run) -> None:
    write(logs / "1001" / "1" / "0.log", "driver\n")
    write(logs / "1001" / "1" / "1.log", "worker 1\n")
    write(logs / "1001" / "2" / "0.log", "retry driver\n")
    write(logs / "1001" / "notes.txt", "ignored\n")

    collect()

    assert (stored(running, 1, 0), stored(running, 1, 1), stored(running, 2, 0)) == (
        "driver\n", "worker 1\n", "retry driver\n",
    )  # fmt: skip


def test_truncation_and_rotation_start_again_from_the_top_with_a_note(logs: Path, running: Run) -> None:
    log = logs / "1001" / "1" / "0.log"
    write(log, "a long first line of the old file\nsecond\n")
    collect()

    write(log, "fresh\n", mode="wb")  # truncated in place: smaller than what was read
    output = collect()
    assert "logs: 1001/1/0.log was truncated or rotated; reading it again from the start" in output
    assert stored(running).endswith("second\nfresh\n")
    assert RunEvent.objects.filter(run=running, kind=RunEventKind.NOTE).count() == 1

    os.rename(log, log.with_name("0.log.1"))  # rotated: a new file, larger than the old offset
    write(log, "after rotation, a line longer than the offset\n")
    assert "was truncated or rotated" in collect()
    assert stored(running).endswith("fresh\nafter rotation, a line longer than the offset\n")


def test_an_unknown_run_is_skipped_until_it_exists(world: World, logs: Path) -> None:
    write(logs / "9999" / "1" / "0.log", "early line\n")

    assert "logs: skipped 9999/: no run with this external id (yet)" in collect()
    assert not LogChunk.objects.exists()

    run = make_run(world.vision, "9999", status=RunStatus.RUNNING, ended_at=None)
    collect()
    assert stored(run) == "early line\n"


def test_bad_bytes_are_replaced_and_big_logs_are_chunked(settings, logs: Path, running: Run) -> None:
    settings.AIRBOARD_MAX_LOG_CHUNK_BYTES = 1024
    lines = [f"step {i} loss {1 / (i + 1):.6f} \u2713\n" for i in range(200)]
    long_line = "x" * 3000 + "\u00e9" * 500 + "\n"
    write(logs / "1001" / "1" / "0.log", "".join(lines).encode() + b"bad \xff\xfe bytes\n" + long_line.encode())

    collect()

    chunks = list(LogChunk.objects.order_by("seq"))
    assert len(chunks) > 5 and all(len(chunk.text.encode()) <= 1024 for chunk in chunks)
    text = stored(running)
    assert text == "".join(lines) + "bad \ufffd\ufffd bytes\n" + long_line


def test_a_finished_runs_partial_last_line_is_flushed_once_the_file_stops_growing(logs: Path, world: World) -> None:
    run = make_run(world.vision, "1002")
    write(logs / "1002" / "1" / "0.log", "done\nexit code 0")

    collect()
    assert stored(run) == "done\n"
    collect()
    assert stored(run) == "done\nexit code 0"


def test_the_log_command_appends_only_what_is_new_for_active_and_recent_runs(
    settings, world: World, tmp_path: Path, running: Run
) -> None:
    root = tmp_path / "remote"
    settings.AIRBOARD_LOG_SOURCE_DIR = ""
    settings.AIRBOARD_LOG_SOURCE_COMMAND = f"cat {shlex.quote(str(root))}/{{run_id}}/{{attempt}}/{{node}}.log"
    old = make_run(world.vision, "old", ended_at=timezone.now() - timedelta(days=2))  # not fetched: no file
    write(root / "1001" / "1" / "0.log", "line 1\nline 2\npart")

    assert "logs: 1 node log(s), 1 chunk(s), 2 line(s) stored" in collect()
    assert stored(running) == "line 1\nline 2\n"

    write(root / "1001" / "1" / "0.log", "ial 3\n")
    collect()
    assert stored(running) == "line 1\nline 2\npartial 3\n"
    assert "logs: 1 node log(s), 0 chunk(s), 0 line(s) stored" in collect()
    assert not LogChunk.objects.filter(node__attempt__run=old).exists()

    # A node whose log cannot be fetched is reported; when every fetch fails, the pass fails.
    (root / "1001" / "1" / "0.log").unlink()
    with pytest.raises(CommandError) as excinfo:
        collect()
    assert "every log fetch failed" in str(excinfo.value) and excinfo.value.returncode == 1
    assert "exited with 1" in CollectorState.objects.get(name="logs").last_error


def test_not_configured_says_so_and_records_nothing(settings, db: None) -> None:
    settings.AIRBOARD_LOG_SOURCE_DIR = ""
    settings.AIRBOARD_LOG_SOURCE_COMMAND = ""

    assert logsource.NOT_CONFIGURED in collect()
    assert not CollectorState.objects.exists()


def test_split_lines_never_cuts_a_utf8_character() -> None:
    data = ("\u00e9" * 10).encode()
    pieces = logsource.split_lines(data, 5)
    assert b"".join(pieces) == data and all(piece.decode() for piece in pieces)
    assert logsource.split_lines(b"a\nbb\nccc\n", 6) == [b"a\nbb\n", b"ccc\n"]
