"""The API examples of README.md ("API quick start") and docs/api.md ("Using the API"), run as written.

Every shell block of each section is read out of its file: the `create_api_key` command runs
through `call_command` and its printed key replaces `$KEY`; each `curl` is sent to the app with
its headers, body and path. Each must succeed, and what it pushed must land on the run the
first example created: a key's run is `local` by default, and so is the run its samples, log
chunks and egress records name when they name no source. Edit the examples and this test runs
the new ones; break them and it fails.
"""

from __future__ import annotations

import json
import re
import shlex
from datetime import datetime, timedelta
from io import StringIO
from urllib.parse import urlsplit

import pytest
import time_machine
from django.core.management import call_command
from django.test import Client

from billing.models import EgressRecord
from runs import ingest_process
from runs.choices import RunSource
from runs.models import GpuSample, LogChunk, Run
from tests.conftest import ROOT, World

# (file, section, the push paths its examples must show): the README's quick start is the short
# version, docs/api.md's section every write a newcomer needs.
DOCUMENTS = [
    ("README.md", "## API quick start", {"/api/v1/runs", "/api/v1/gpu-samples"}),
    ("docs/api.md", "## Using the API", {"/api/v1/runs", "/api/v1/gpu-samples", "/api/v1/egress"}),
]
documents = pytest.mark.parametrize(("name", "heading", "paths"), DOCUMENTS, ids=[d[0] for d in DOCUMENTS])


def api_section(name: str, heading: str) -> str:
    text = (ROOT / name).read_text()
    start = text.index(heading)
    following = text.find("\n## ", start + len(heading))
    return text[start : following if following != -1 else len(text)]


def shell_commands(section: str) -> list[list[str]]:
    """The section's ```sh blocks as commands (line continuations joined, comments and `KEY=` dropped)."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", section, flags=re.S):
        pending = ""  # a command whose quoted argument (a JSON body) goes on over lines
        for line in block.replace("\\\n", " ").splitlines():
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            pending += line + "\n"
            try:
                argv = shlex.split(pending)
            except ValueError:  # a quote still open
                continue
            pending = ""
            if not re.match(r"^[A-Z_]+=", argv[0]):
                commands.append(argv)
        assert not pending, f"an example with an unclosed quote: {pending[:200]}"
    return commands


def curl_request(argv: list[str], key: str) -> tuple[str, str, dict[str, str], str | None]:
    """(method, path, headers, body) of a `curl` command line, `$KEY` replaced by `key`."""
    headers, body, url = {}, None, None
    args = iter(argv[1:])
    for arg in args:
        if arg == "-H":
            name, _, value = next(args).partition(":")
            headers[name.strip().lower()] = value.strip().replace("$KEY", key)
        elif arg == "-d":
            body = next(args)
        elif arg.startswith("http"):
            url = arg
        else:
            raise AssertionError(f"the test does not know curl's {arg!r}: teach it, or keep the README plain")
    assert url is not None, argv
    return ("POST" if body is not None else "GET"), urlsplit(url).path, headers, body


def latest_timestamp(section: str) -> datetime:
    """The latest ISO time the examples name: the test runs just after it, as a reader would."""
    stamps = re.findall(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", section)
    return max(datetime.fromisoformat(s.replace("Z", "+00:00")) for s in stamps)


@documents
def test_the_section_has_the_examples_this_test_reads(name: str, heading: str, paths: set[str]) -> None:
    commands = shell_commands(api_section(name, heading))
    assert any(c[:3] == [".venv/bin/python", "manage.py", "create_api_key"] for c in commands)
    shown = {curl_request(c, "k")[1] for c in commands if c[0] == "curl" and "-d" in c}
    assert paths <= shown


@documents
@pytest.mark.django_db
def test_the_api_examples_work_as_written(world: World, name: str, heading: str, paths: set[str]) -> None:
    section = api_section(name, heading)
    commands = shell_commands(section)
    key, answers = "", []
    with time_machine.travel(latest_timestamp(section) + timedelta(minutes=1), tick=False):
        for argv in commands:
            if argv[:3] == [".venv/bin/python", "manage.py", "create_api_key"]:
                out = StringIO()
                call_command(argv[2], *argv[3:], stdout=out, stderr=StringIO())
                key = out.getvalue().strip()
                continue
            assert argv[0] == "curl", f"an example the test cannot run: {argv}"
            method, path, headers, body = curl_request(argv, key)
            client = Client(headers={k: v for k, v in headers.items() if k != "content-type"})
            if method == "POST":
                response = client.post(path, body, content_type=headers.get("content-type", "application/json"))
            else:
                response = client.get(path)
            assert response.status_code < 300, (path, response.status_code, response.content[:500])
            answers.append((path, response.json()))
    requests = [curl_request(c, key) for c in commands if c[0] == "curl"]
    run_body = json.loads(next(body for _, path, _, body in requests if path == "/api/v1/runs"))
    run = Run.objects.get(external_id=run_body["external_id"])
    # The key's own source: local, since the examples' key is created without --source.
    assert (run.source, run.team) == (RunSource.LOCAL, world.vision)
    if any(path.endswith("/logs") for _, path, _, _ in requests):
        assert LogChunk.objects.filter(node__attempt__run=run).exists()
    if "/api/v1/egress" in paths:
        assert EgressRecord.objects.filter(run=run).exists()
    (batch,) = [body for path, body in answers if path == "/api/v1/gpu-samples"]
    ingest_process.process_batch(batch["id"])  # what the worker does with the accepted batch
    assert GpuSample.objects.filter(run=run).exists()
