"""The versioned JSON API: `/api/v1/`, described at `/api/v1/openapi.json`, browsable at `/api/v1/docs`.

Machines authenticate with `Authorization: Bearer <key>` (keys from `manage.py create_api_key`);
a logged-in browser session may read. Every error answers JSON with `detail` (a sentence) and,
for invalid input, `errors`: one entry per bad field or row, with its location.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from operator import attrgetter
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, DataError, IntegrityError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer, django_auth

from dashboard.kit import access, ratelimit
from dashboard.models import ApiKey
from runs.choices import RunSource
from runs.models import Run

logger = logging.getLogger(__name__)


class RateLimited(HttpError):
    """A 429 that tells the client when to come back (Retry-After, in seconds)."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(429, message)
        self.retry_after = retry_after


class BearerKey(HttpBearer):
    """`Authorization: Bearer ab_...`: an API key bound to one team and one role."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        if not token or len(token) > 200:
            return None
        key = ApiKey.authenticate(token)
        if key is not None and request.method not in ("GET", "HEAD", "OPTIONS"):
            # Writes are rate limited per key (keyed by its hash: unique even where ids are reused).
            limit = ratelimit.Limit(settings.AIRBOARD_INGEST_RATE_PER_MINUTE, 60)
            decision = ratelimit.hit("ingest", key.key_hash, limit)
            if not decision.allowed:
                raise RateLimited(
                    f"More than {limit.count} write requests a minute with this key; retry after "
                    f"{decision.retry_after} s, or send larger batches.",
                    decision.retry_after,
                )
        return key


bearer = BearerKey()

api = NinjaAPI(
    title="Airboard API",
    version="1",
    description=(
        "Push runs, logs, GPU telemetry and MLflow metrics into Airboard, and read runs back. "
        "Authenticate with `Authorization: Bearer <key>` (see `manage.py create_api_key`).\n\n"
        "Ownership: a run is its (source, external id) within one team. A key writes runs of its own "
        "source (`local` unless the key was created with `--source`) into its own team, never changes a "
        "run the run source collector wrote, and sees nothing of other teams: another team's run with "
        "the same id answers exactly as an unused id would."
    ),
    urls_namespace="api",
)


def error_response(
    request: HttpRequest, status: int, detail: str, errors: list[dict[str, Any]] | None = None
) -> HttpResponse:
    body: dict[str, Any] = {"detail": detail}
    if errors is not None:
        body["errors"] = errors
    return api.create_response(request, body, status=status)


def _location(loc: tuple | list) -> str:
    """('body', 'payload', 'samples', 3, 'ts') -> 'samples[3].ts'."""
    parts = [p for p in loc if p not in ("body", "payload", "query", "path")]
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "body"


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = [{"field": _location(e.get("loc", ())), "message": e.get("msg", "invalid")} for e in exc.errors]
    return error_response(request, 422, f"{len(errors)} invalid field(s); nothing was stored.", errors)


@api.exception_handler(AuthenticationError)
def _auth_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return error_response(request, 401, "Authentication required: send 'Authorization: Bearer <api key>'.")


class InvalidRows(HttpError):
    """A 422 naming each bad row of a batch (nothing of the batch is stored)."""

    def __init__(self, errors: list[dict[str, str]]) -> None:
        super().__init__(422, f"{len(errors)} invalid row(s); nothing was stored.")
        self.errors = errors


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return error_response(request, exc.status_code, str(exc), getattr(exc, "errors", None))


@api.exception_handler(RateLimited)
def _rate_limited(request: HttpRequest, exc: RateLimited) -> HttpResponse:
    response = error_response(request, 429, str(exc))
    response["Retry-After"] = str(exc.retry_after)
    return response


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return error_response(request, 413, "Request body too large; split it into smaller batches.")


@api.exception_handler(DatabaseError)
def _database_down(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
    # The request's transaction rolled back: nothing was half-written.
    if isinstance(exc, DataError):
        # A value the schema let through but the database cannot hold (a NUL in PostgreSQL
        # text, an integer past 64 bits): the request's fault, not the database's.
        logger.warning("value refused by the database: %s", exc)
        if "NUL" in str(exc):
            detail = "A text value contains a NUL (U+0000) character, which cannot be stored; remove it."
        else:
            detail = "A value is out of the range the database can store."
        return error_response(request, 422, detail)
    if isinstance(exc, IntegrityError):
        logger.warning("write refused by a database constraint: %s", exc)
        return error_response(request, 409, "The request conflicts with stored data; nothing was stored.")
    # Anything else is the database being unavailable: ask the client to retry.
    logger.exception("database error during API request")
    response = error_response(request, 503, "The database is unavailable; nothing was stored. Retry shortly.")
    response["Retry-After"] = "5"
    return response


class Access:
    """Who is calling: an API key (one team, one role) or a logged-in user (their teams)."""

    def __init__(self, request: HttpRequest) -> None:
        principal = getattr(request, "auth", None)  # set by django-ninja's authentication
        self.key: ApiKey | None = principal if isinstance(principal, ApiKey) else None
        self.user: User | None = principal if isinstance(principal, User) else None

    def teams(self) -> QuerySet[Group]:
        if self.key is not None:
            return access.key_teams(self.key)
        assert self.user is not None
        return access.visible_teams(self.user)

    def require_write(self) -> Group:
        """Writes need an ingest key; they land in the key's team."""
        if self.key is None or not self.key.can_write:
            raise HttpError(403, "This operation needs an API key with the 'ingest' role.")
        return self.key.team


# Reads accept a key or a logged-in session; writes check the key's role in the view.
read_auth = [bearer, django_auth]


# --- The runs a pushed batch names: shared by the runs and billing APIs ---------------------


def resolve_runs(request: HttpRequest, refs: Iterable[tuple[str, str]]) -> dict[tuple[str | None, str], Run]:
    wanted = set(refs)
    external_ids = {ext for _, ext in wanted}
    runs = Run.objects.filter(team__in=Access(request).teams(), external_id__in=external_ids)
    return {(r.source, r.external_id): r for r in runs if (r.source, r.external_id) in wanted}


def find_run(request: HttpRequest, external_id: str, source: str | None, runs: QuerySet[Run] | None = None) -> Run:
    """The run a read names by its external id (and source), among the caller's teams; `runs`
    narrows or prefetches. 404 when the teams have none (another team's run answers exactly as
    an unused id), 409 when several sources have a run with that id and `source` is not given."""
    found = (Run.objects.all() if runs is None else runs).filter(
        team__in=Access(request).teams(), external_id=external_id
    )
    if source:
        found = found.filter(source=source)
    first_two = list(found[:2])
    if not first_two:
        raise HttpError(404, f"No run {external_id!r} in your teams.")
    if len(first_two) > 1:
        raise HttpError(409, f"Several sources have a run {external_id!r}; add ?source=serverless|classic|local.")
    return first_two[0]


def check_count(rows: list[Any], what: str) -> None:
    cap = settings.AIRBOARD_MAX_SAMPLES_PER_BATCH
    if len(rows) > cap:
        raise HttpError(413, f"{len(rows)} {what} in one request; the limit is {cap}. Split the batch.")


def own_source(
    request: HttpRequest, rows: list[Any], keys: Sequence[tuple[str | None, str, Any]]
) -> list[tuple[str, str, Any]]:
    """Rows naming no `run_source` name a run of the caller's own source: the key's (`local`
    unless it was created with `--source`), as a run it upserts without `source` is. The row
    is given it, so the caller reads one source per row; `keys` come back with it filled in."""
    caller = Access(request).key
    source = caller.source if caller is not None else RunSource.LOCAL
    out = []
    for row, (given, run, ts) in zip(rows, keys, strict=True):
        if given is None:
            if isinstance(row, dict):
                row["run_source"] = source
            else:
                row.run_source = source
        out.append((given or source, run, ts))
    return out


def batch_runs(
    request: HttpRequest,
    rows: list[Any],
    what: str,
    skew_checked: bool = True,
    check: Callable[[str, Any], list[dict[str, str]]] | None = None,
    key: Callable[[Any], tuple[str, str, Any]] = attrgetter("run_source", "run", "ts"),
) -> tuple[dict[tuple[str | None, str], Run], list[dict[str, str]]]:
    """The runs a pushed batch names, with an error for each row naming a run outside the caller's teams.

    1. More rows than AIRBOARD_MAX_SAMPLES_PER_BATCH is a 413 before anything is read.
    2. One query for the runs the rows name (`run_source`, `run`; left out, the caller's own
       source: `own_source`), among the caller's teams.
    3. Each row is checked in order: `{what}[i].run` when its run is not found and, with
       `skew_checked`, `{what}[i].ts` when it is further in the future than
       AIRBOARD_MAX_FUTURE_SKEW_SECONDS (a clock error, not data); then the caller's own
       `check(prefix, row)`, so every error of a row stands together, rows in order.
    The caller raises InvalidRows if there are any. `key` reads (run source, run, ts) off a
    row: attributes of a model by default.
    """
    check_count(rows, what)
    keys = [key(r) for r in rows]
    if any(source is None for source, _, _ in keys):
        keys = own_source(request, rows, keys)
    wanted = {(source, run) for source, run, _ in keys}
    runs = resolve_runs(request, wanted)
    horizon = timezone.now() + timedelta(seconds=settings.AIRBOARD_MAX_FUTURE_SKEW_SECONDS)
    errors: list[dict[str, str]] = []
    # The common case, checked in bulk: every run found, nothing in the future, no row check.
    in_time = not skew_checked or max(ts for _, _, ts in keys) <= horizon
    if check is None and len(runs) == len(wanted) and in_time:
        return runs, errors
    for i, (r, (source, run, ts)) in enumerate(zip(rows, keys, strict=True)):
        if (source, run) not in runs:
            errors.append({"field": f"{what}[{i}].run", "message": f"no run {run!r} ({source}) in your team"})
        if skew_checked and ts > horizon:
            errors.append({"field": f"{what}[{i}].ts", "message": "is more than the allowed skew in the future"})
        if check is not None:
            errors += check(f"{what}[{i}]", r)
    return runs, errors
