"""`/metrics`: Airboard's own figures for Prometheus, behind a bearer token.

Not a login page: Prometheus has no session. With no AIRBOARD_METRICS_TOKEN configured the
URL answers 404, so a deployment that never set one does not expose every team's spend; a
missing or wrong token answers 401. The figures cover every team, so the token is an
operator's credential, like a database password. A signed-in staff member, who sees every
team anyway, reads the page in the browser without the token (so the demo's admin can try it).
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from dashboard.kit import access
from dashboard.metrics import exposition

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _bearer(request: HttpRequest) -> str:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    expected = getattr(settings, "AIRBOARD_METRICS_TOKEN", "")
    if request.user.is_authenticated and access.sees_all_teams(request.user):
        return _answer()
    if not expected:
        raise Http404("Metrics are off: set AIRBOARD_METRICS_TOKEN to turn them on.")
    # Constant-time comparison: the answer's timing must not reveal how much of a guess was right.
    if not hmac.compare_digest(_bearer(request).encode(), expected.encode()):
        response = HttpResponse("A valid bearer token is required.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="airboard-metrics"'
        return response
    return _answer()


def _answer() -> HttpResponse:
    response = HttpResponse(exposition(), content_type=CONTENT_TYPE)
    response["Cache-Control"] = "no-store"
    return response
