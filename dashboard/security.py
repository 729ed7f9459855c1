"""Security middleware: the Content Security Policy, and a request body cap answered with 413.

Django's own SecurityMiddleware sends X-Content-Type-Options and Referrer-Policy, and
XFrameOptionsMiddleware sends X-Frame-Options: DENY; Django 5.2 has no CSP, so it is here.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

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
