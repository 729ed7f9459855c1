"""Access rules for every page and every API operation, generated from the URL configuration.

The pages come from walking `get_resolver().url_patterns`, the API operations from the
OpenAPI document, so a page or operation added later is checked without anyone remembering
to: if it takes a path argument this file cannot fill, or a body it has no example of, the
test fails and says what to add.

Rules: anonymous -> login redirect (API: 401); charlie, of another team -> 404 on vision's
objects, and vision's runs absent from his lists (API: 404 or an empty list); alice, a vision
member -> 200 (API: a read key on a write operation -> 403).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RoutePattern

from billing.models import AcceleratorPrice, AlertChannel, UsagePolicy
from billing.policies.versions import record_version
from dashboard.models import ApiKeyRole
from runs.choices import AcceleratorType, BatchKind
from runs.models import Cluster, FailureAnalysis, IngestBatch, PostMortem, Run
from tests.conftest import T0, World, make_run

# Public by design, or not pages of ours: the admin has its own staff checks, the API is
# checked operation by operation below, login/logout are where anonymous users go.
SKIP_PREFIXES = ("admin/", "api/", "static/", "media/", "__debug__/")
# /metrics is for Prometheus: a bearer token, not a login (tests/dashboard/test_metrics.py checks it).
# /favicon.ico redirects every visitor to the static icon (tests/dashboard/test_wording_and_frame.py).
SKIP_NAMES = {"login", "logout", "metrics", "favicon"}

# Distinctive strings that only vision's data carries: none may show on another team's pages.
VISION_RUN_ID = "vision-private-run-7f3a"
VISION_EXPERIMENT = "/Workspace/Users/alice/vision-private-experiment"
ADMISSION_WORKLOAD = """\
experiment_name: /Workspace/Users/alice/admission-check
compute:
  accelerator_type: GPU_1xA10
  num_accelerators: 1
command: python train.py
"""


@dataclass
class Seeded:
    """Real objects to fill path arguments with: vision's, never charlie's."""

    world: World
    run: Run
    batch: IngestBatch
    price: AcceleratorPrice
    policy: UsagePolicy
    channel: AlertChannel
    cluster: Cluster
    postmortem: PostMortem | None = None


@dataclass(frozen=True)
class Page:
    """How a page answers. `other` is charlie's status; 200 means "a list: vision's data absent"."""

    args: Callable[[Seeded], dict[str, Any]] | None = None
    member: int = 200
    other: int = 404


# Every URL name that takes path arguments needs an entry: the arguments, and who may see it.
# Pages without arguments default to Page(other=200): list pages every user opens, scoped.
PAGES: dict[str, Page] = {
    "run_detail": Page(lambda s: {"pk": s.run.pk}),
    "run_log": Page(lambda s: {"pk": s.run.pk}),
    "run_log_view": Page(lambda s: {"pk": s.run.pk}),
    "run_cancel": Page(lambda s: {"pk": s.run.pk}),
    "run_telemetry": Page(lambda s: {"pk": s.run.pk}),
    # Failures and post-mortems (runs/failures/views.py).
    "failure_detail": Page(lambda s: {"pk": s.run.pk}),
    "run_log_tail": Page(lambda s: {"pk": s.run.pk}),
    "run_search": Page(lambda s: {"pk": s.run.pk}),
    "postmortem_new": Page(lambda s: {"pk": s.run.pk}),
    "postmortem_detail": Page(lambda s: {"pk": s.postmortem.pk}),
    "postmortem_edit": Page(lambda s: {"pk": s.postmortem.pk}),
    "run_status": Page(lambda s: {"pk": s.run.pk}),
    "cluster_detail": Page(lambda s: {"pk": s.cluster.pk}),
    # The price book is shared by every team; only billing admins (staff) change it.
    "price_new": Page(lambda s: {"kind": "accelerator"}, member=403, other=403),
    "price_edit": Page(lambda s: {"kind": "accelerator", "pk": s.price.pk}, member=403, other=403),
    "price_upload": Page(member=403, other=403),
    # Policies: a team's members read them; only policy admins (staff here) change them.
    "policy_new": Page(member=403, other=403),
    "policy_detail": Page(lambda s: {"pk": s.policy.pk}),
    "policy_edit": Page(lambda s: {"pk": s.policy.pk}, member=403),
    "policy_versions": Page(lambda s: {"pk": s.policy.pk}),
    "policy_rollback": Page(lambda s: {"pk": s.policy.pk, "number": 1}, member=403),
    "policy_channel_add": Page(lambda s: {"pk": s.policy.pk}, member=403),
    "policy_channel_delete": Page(lambda s: {"pk": s.policy.pk, "channel_pk": s.channel.pk}, member=403),
}

ARGUMENT = re.compile(r"<(?:(?P<converter>[^>:]+):)?(?P<name>\w+)>")


@dataclass(frozen=True)
class Route:
    name: str
    route: str

    @property
    def arguments(self) -> list[str]:
        return [m.group("name") for m in ARGUMENT.finditer(self.route)]


def _walk(patterns: list, prefix: str = "") -> list[Route]:
    routes = []
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if route.startswith(SKIP_PREFIXES):
            continue
        if not isinstance(entry.pattern, RoutePattern):
            raise AssertionError(f"/{route}: a regex URL; teach tests/dashboard/test_access_every_url.py to fill it")
        if isinstance(entry, URLResolver):
            routes.extend(_walk(entry.url_patterns, route))
        elif isinstance(entry, URLPattern):
            routes.append(Route(entry.name or route, route))
    return routes


def page_routes() -> list[Route]:
    """Every page of ours in the URL configuration (module-level: the ids name each test)."""
    return [r for r in _walk(get_resolver().url_patterns) if r.name not in SKIP_NAMES]


def fill_url(route: Route, seeded: Seeded) -> str:
    page = PAGES.get(route.name)
    if route.arguments and (page is None or page.args is None):
        raise AssertionError(
            f"URL /{route.route} (name {route.name!r}) takes {route.arguments} but "
            "tests/dashboard/test_access_every_url.py "
            f"has no fixture for it: add PAGES[{route.name!r}] = Page(lambda s: {{...}}) with a vision object."
        )
    values = page.args(seeded) if page and page.args else {}
    missing = set(route.arguments) - set(values)
    assert not missing, f"PAGES[{route.name!r}] does not fill {sorted(missing)}"
    return "/" + ARGUMENT.sub(lambda m: str(values[m.group("name")]), route.route)


@pytest.fixture
def seeded(world: World) -> Seeded:
    run = make_run(world.vision, VISION_RUN_ID, experiment_name=VISION_EXPERIMENT)
    make_run(world.nlp, "nlp-run-1", experiment_name="/Workspace/Users/charlie/nlp")
    batch = IngestBatch.objects.create(
        team=world.vision, kind=BatchKind.METRICS, content_hash="0" * 64, rows=[], row_count=0
    )
    price = AcceleratorPrice.objects.create(
        accelerator_type=AcceleratorType.H100_8, region="us-west-2", effective_from=T0 - timedelta(days=400),
        usd_per_hour="9.5", kind="list", source="test",
    )  # fmt: skip
    policy = UsagePolicy.objects.create(name="vision-private-policy", budget_usd="1000")
    policy.teams.add(world.vision)
    record_version(policy, world.sam)
    channel = AlertChannel.objects.create(policy=policy, kind="email", target="alice@example.com")
    # Named after vision's experiment, so charlie's pages are checked not to show it either.
    cluster = Cluster.objects.create(
        team=world.vision, cluster_id="vision-private-cluster", name=VISION_EXPERIMENT, node_type_id="g5.xlarge",
        spark_version="15.4.x-gpu-ml-scala2.12", runtime_engine="PHOTON", start_time=T0,
    )  # fmt: skip
    seeded = Seeded(world, run, batch, price, policy, channel, cluster)
    seeded.postmortem = PostMortem.objects.create(run=run, title="vision post-mortem", owner=world.alice)
    # The failure read API (GET /api/v1/runs/{external_id}/failure) answers for a classified run.
    FailureAnalysis.objects.create(run=run, class_id="cuda_oom", title="CUDA out of memory", evidence=VISION_EXPERIMENT)
    return seeded


def _method(client: Client, url: str) -> str:
    # A POST-only view (require_POST) answers a GET with 405: then every check POSTs.
    return "post" if client.get(url).status_code == 405 else "get"


def _request(client: Client, method: str, url: str):
    return getattr(client, method)(url)


def test_every_page_route_is_found() -> None:
    names = {r.name for r in page_routes()}
    # The walk itself works: the pages every build has are among those found.
    assert {"overview", "run_list", "run_detail", "collectors"} <= names


@pytest.mark.parametrize("route", page_routes(), ids=lambda r: r.name)
def test_page_access(route: Route, seeded: Seeded) -> None:
    world = seeded.world
    url = fill_url(route, seeded)
    page = PAGES.get(route.name, Page(other=200))
    alice = world.client_for(world.alice)
    method = _method(alice, url)

    anonymous = _request(Client(), method, url)
    assert anonymous.status_code == 302, f"{url}: anonymous got {anonymous.status_code}"
    assert anonymous["Location"].startswith("/login/"), f"{url}: anonymous sent to {anonymous['Location']}"

    charlie = _request(world.client_for(world.charlie), method, url)
    assert charlie.status_code == page.other, f"{url}: charlie (team nlp) got {charlie.status_code}"
    body = charlie.content.decode("utf-8", "replace")
    assert VISION_RUN_ID not in body and VISION_EXPERIMENT not in body, f"{url}: charlie sees vision's run"

    member = _request(alice, method, url)
    if method == "post" and page.member == 200:
        # A form action answers with a redirect to a page, never to the login.
        assert member.status_code in (200, 302), f"{url}: alice got {member.status_code}"
        if member.status_code == 302:
            assert not member["Location"].startswith("/login/")
    else:
        assert member.status_code == page.member, f"{url}: alice (team vision) got {member.status_code}"


def test_member_sees_own_run_in_lists(seeded: Seeded) -> None:
    """The list check above is only meaningful if vision's run does show to vision."""
    body = seeded.world.client_for(seeded.world.alice).get("/runs/").content.decode()
    assert VISION_RUN_ID in body


# --- API -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Operation:
    """A write operation's example body, and what a key of another team gets for it.

    other: 404 (vision's run is invisible), 422 (the rows naming vision's run are refused), or
    201 (an upsert naming an external id another team holds creates the caller's own run,
    exactly as an unused id would: no existence oracle). In every case vision's run is
    checked to be untouched afterwards.
    """

    body: Callable[[Seeded], dict[str, Any]]
    other: int
    read_key: int = 403  # a read-only check (admission's dry run) answers 200


WRITES: dict[str, Operation] = {
    "POST /api/v1/runs": Operation(lambda s: {"external_id": VISION_RUN_ID, "status": "failed"}, other=201),
    "POST /api/v1/runs/{external_id}/logs": Operation(lambda s: {"seq": 0, "text": "hello\n"}, other=404),
    "POST /api/v1/runs/{external_id}/telemetry-file": Operation(
        lambda s: {"text": "timestamp, index, utilization.gpu [%]\n2026/11/02 09:00:00.000, 0, 50 %\n"}, other=404
    ),
    "POST /api/v1/gpu-samples": Operation(
        lambda s: {"samples": [{"run": VISION_RUN_ID, "gpu": 0, "ts": T0.isoformat(), "utilization_gpu": 50}]},
        other=422,
    ),
    # Admission is a dry run any key of the team may ask; another team's key is refused.
    "POST /api/v1/admission": Operation(
        lambda s: {"workload_yaml": ADMISSION_WORKLOAD, "team": "vision"}, other=403, read_key=200
    ),
    "POST /api/v1/metrics": Operation(
        lambda s: {"points": [{"run": VISION_RUN_ID, "key": "loss", "ts": T0.isoformat(), "value": 1.0}]},
        other=422,
    ),
    "POST /api/v1/egress": Operation(
        lambda s: {
            "records": [
                {
                    "run": VISION_RUN_ID,
                    "source_region": "us-west-2",
                    "destination_region": "us-east-1",
                    "bytes": 10**9,
                    "ts": T0.isoformat(),
                }
            ]
        },
        other=422,
    ),
}
# Path parameters of API operations, filled with vision's objects.
API_ARGS: dict[str, Callable[[Seeded], Any]] = {
    "external_id": lambda s: s.run.external_id,
    "batch_id": lambda s: s.batch.pk,
}


def _operations(client: Client) -> list[tuple[str, str, dict]]:
    spec = client.get("/api/v1/openapi.json").json()
    ops = []
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            if method in {"get", "post", "put", "patch", "delete"}:
                ops.append((method.upper(), path, op))
    return ops


def _api_url(path: str, op: dict, seeded: Seeded) -> str:
    def fill(match: re.Match) -> str:
        name = match.group(1)
        if name not in API_ARGS:
            raise AssertionError(
                f"{path}: path parameter {name!r} has no fixture; add API_ARGS[{name!r}] in "
                "tests/dashboard/test_access_every_url.py"
            )
        return str(API_ARGS[name](seeded))

    return re.sub(r"\{(\w+)\}", fill, path)


def _call(client: Client, method: str, url: str, body: dict | None) -> Any:
    if method == "GET":
        return client.get(url)
    return client.generic(method, url, json.dumps(body or {}), content_type="application/json")


def _key_client(world: World, team: Group, role: str) -> Client:
    return Client(headers={"authorization": f"Bearer {world.key(team, role)}"})


@pytest.mark.django_db
def test_every_api_operation(seeded: Seeded) -> None:
    world = seeded.world
    ops = _operations(Client())
    assert ops, "the OpenAPI document lists no operation"
    vision_read = _key_client(world, world.vision, ApiKeyRole.READ)
    nlp_read = _key_client(world, world.nlp, ApiKeyRole.READ)
    nlp_ingest = _key_client(world, world.nlp, ApiKeyRole.INGEST)
    before = Run.objects.values().get(pk=seeded.run.pk)
    for method, path, op in ops:
        label = f"{method} {path}"
        url = _api_url(path, op, seeded)
        write = method != "GET"
        if write and label not in WRITES:
            raise AssertionError(f"{label}: a write operation with no example body; add WRITES[{label!r}]")
        body = WRITES[label].body(seeded) if write else None

        anonymous = _call(Client(), method, url, body)
        assert anonymous.status_code == 401, f"{label}: no key got {anonymous.status_code}"

        if write:
            read_key = _call(vision_read, method, url, body)
            expected_read = WRITES[label].read_key
            assert read_key.status_code == expected_read, f"{label}: a read key got {read_key.status_code}"
            other = _call(nlp_ingest, method, url, body)
            expected = WRITES[label].other
            assert other.status_code == expected, f"{label}: another team's key got {other.status_code}"
            # nlp's own twin of vision's id (created like any unused id) would be nlp's to read
            # below; it goes, so the reads check that vision's run stays invisible.
            Run.objects.filter(team=world.nlp).delete()
        else:
            other = _call(nlp_read, method, url, body)
            has_path_args = "{" in path
            if has_path_args:
                assert other.status_code == 404, f"{label}: another team's key got {other.status_code}"
            else:
                assert other.status_code == 200, f"{label}: another team's key got {other.status_code}"
            text = other.content.decode()
            # A 404 may echo the id the caller sent; nothing else of vision's may appear.
            assert VISION_EXPERIMENT not in text, f"{label}: vision's data leaked"
            assert other.status_code == 404 or VISION_RUN_ID not in text, f"{label}: vision's run listed"
            own = _call(vision_read, method, url, body)
            assert own.status_code == 200, f"{label}: vision's own read key got {own.status_code}"
    # Nothing another team sent changed vision's run.
    assert Run.objects.values().get(pk=seeded.run.pk) == before
