"""Security middleware: the Content Security Policy, a request body cap answered with 413, and the
hooks django-axes calls for the login lockout.

Django's own SecurityMiddleware sends X-Content-Type-Options and Referrer-Policy, and
XFrameOptionsMiddleware sends X-Frame-Options: DENY; Django 5.2 has no CSP, so it is here.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from dashboard.kit import ratelimit

# script-src is strict: 'self' only, no inline script, no eval. The pages pass data to scripts
# with json_script (<script type="application/json">), which the browser never executes, so CSP
# does not govern it; django-ninja's Swagger page works the same way (swagger-ui-init.js reads
# a JSON block), so /api/v1/docs needs no exception.
#
# style-src allows 'unsafe-inline', deliberately: plotly.js sets style attributes
# (`attr("style", ...)`) and adds a <style> element for its mode bar and hover rules, and
# Swagger UI and the fleet grid's heat cells use style attributes; under `style-src 'self'`
# those are dropped and the charts lose their controls' layout. Inline style cannot run code;
# the remaining risk (CSS-based exfiltration of page text) needs an HTML injection first, which
# autoescaping and script-src already guard. See SECURITY.md.
DEFAULT_CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


class ContentSecurityPolicyMiddleware:
    """Adds `Content-Security-Policy` (settings.AIRBOARD_CSP, else DEFAULT_CSP) to every response that has none."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        policy = getattr(settings, "AIRBOARD_CSP", "") or DEFAULT_CSP
        if "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy
        return response


class RequestBodyLimitMiddleware:
    """Refuses a request whose declared body exceeds DATA_UPLOAD_MAX_MEMORY_SIZE with a 413.

    Django itself raises RequestDataTooBig only when a view reads request.POST or body, and
    outside the API that becomes a bare 400; answering from Content-Length up front gives every
    URL the same clear 413 and never reads the oversized body at all. A body sent without a
    Content-Length (chunked) still meets Django's own cap when read.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        cap = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if cap is not None and length > cap:
            detail = f"Request body too large: {length} bytes, the limit is {cap}; split it into smaller requests."
            if request.path.startswith("/api/"):
                return HttpResponse(json.dumps({"detail": detail}), status=413, content_type="application/json")
            return HttpResponse(detail, status=413, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


# --- Login lockout (django-axes, settings AXES_*) ---------------------------------------------


def login_failure_limit(request: HttpRequest, credentials: dict[str, Any] | None) -> int:
    """Failures of one (username, address) before the lock: AIRBOARD_LOGIN_FAILURES."""
    return settings.AIRBOARD_LOGIN_FAILURES


def login_cool_off(request: HttpRequest | None = None) -> timedelta:
    """How long a lock lasts, counted from the last failure: AIRBOARD_LOGIN_WINDOW_SECONDS."""
    return timedelta(seconds=settings.AIRBOARD_LOGIN_WINDOW_SECONDS)


def login_username(request: HttpRequest, credentials: dict[str, Any] | None) -> str:
    """The username as counted: trimmed and lower-cased, so 'ALICE' does not restart alice's count."""
    raw = (credentials or {}).get("username") or request.POST.get("username", "")
    return str(raw)[:150].strip().lower()


def login_client_ip(request: HttpRequest) -> str | None:
    """The address as counted: behind AIRBOARD_TRUSTED_PROXIES proxies, the one the outermost saw.

    None when there is no valid address (a login made in-process): axes stores addresses in an
    inet column on PostgreSQL, which refuses anything else.
    """
    address = ratelimit.client_ip(request, settings.AIRBOARD_TRUSTED_PROXIES)
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


def login_locked_out(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: dict[str, Any] | None = None
) -> HttpResponse:
    """The 429 a locked login gets, with Retry-After (the whole window: the lock ends by then)."""
    seconds = settings.AIRBOARD_LOGIN_WINDOW_SECONDS
    response = HttpResponse(
        f"Too many failed logins; try again in {seconds} seconds.", status=429, content_type="text/plain; charset=utf-8"
    )
    response["Retry-After"] = str(seconds)
    return response
