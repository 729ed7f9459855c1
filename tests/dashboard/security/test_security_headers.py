"""Response headers (CSP, nosniff, referrer, framing) and CSRF on every form."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from dashboard.kit.security import DEFAULT_CSP
from tests.conftest import ROOT, World
from tests.dashboard.test_access_every_url import PAGES, Seeded, fill_url, page_routes, seeded  # noqa: F401


def _directives(policy: str) -> dict[str, str]:
    return {part.split()[0]: part.strip() for part in policy.split(";") if part.strip()}


@pytest.mark.parametrize("path", ["/", "/runs/", "/login/", "/api/v1/openapi.json", "/api/v1/docs"])
def test_every_response_carries_the_security_headers(world: World, path: str) -> None:
    response = world.client_for(world.alice).get(path)
    assert response.status_code == 200
    csp = _directives(response["Content-Security-Policy"])
    assert csp["script-src"] == "script-src 'self'"
    assert csp["object-src"] == "object-src 'none'"
    assert csp["frame-ancestors"] == "frame-ancestors 'none'"
    assert csp["base-uri"] == "base-uri 'self'"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Frame-Options"] == "DENY"


def test_the_default_policy_allows_no_inline_or_eval_script() -> None:
    script = _directives(DEFAULT_CSP)["script-src"]
    assert "'unsafe-inline'" not in script and "'unsafe-eval'" not in script


INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.I)
INLINE_HANDLER = re.compile(r"\son[a-z]+\s*=", re.I)


def test_no_template_has_inline_script_or_event_handlers() -> None:
    """What the CSP would block in a browser, caught here: inline <script> blocks and on*= handlers."""
    offenders = []
    for template in (ROOT / "templates").rglob("*.html"):
        text = template.read_text()
        for pattern in (INLINE_SCRIPT, INLINE_HANDLER):
            offenders += [f"{template.relative_to(ROOT)}: {m.group(0)!r}" for m in pattern.finditer(text)]
    assert not offenders, "\n".join(offenders)


def test_the_api_docs_page_runs_no_inline_script(client: Client) -> None:
    """django-ninja's Swagger page passes its settings as JSON data, so script-src 'self' is enough."""
    html = client.get("/api/v1/docs").content.decode()
    assert not INLINE_SCRIPT.findall(html)


def test_every_post_form_in_templates_has_a_csrf_token() -> None:
    missing = []
    for template in (ROOT / "templates").rglob("*.html"):
        text = template.read_text()
        for form in re.finditer(r"<form\b[^>]*method=\"post\"[^>]*>(.*?)</form>", text, re.I | re.S):
            if "{% csrf_token %}" not in form.group(1):
                missing.append(str(template.relative_to(ROOT)))
    assert not missing


def test_every_page_refuses_a_post_without_a_csrf_token(seeded: Seeded) -> None:  # noqa: F811
    """Staff, who may post to every form; a POST without the token never reaches a view."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(seeded.world.sam)
    urls = [fill_url(route, seeded) for route in page_routes()] + ["/login/", "/logout/"]
    refused = {url: client.post(url, {"x": "1"}).status_code for url in urls}
    assert all(code == 403 for code in refused.values()), refused
    # Nothing was cancelled by the attempts.
    seeded.run.refresh_from_db()
    assert seeded.run.status == "succeeded"


def test_the_csp_applies_to_static_files_too(client: Client) -> None:
    # WhiteNoise answers before the view layer, but after our middleware wraps it.
    response = client.get("/static/js/charts.js")
    assert response.status_code == 200
    assert "script-src 'self'" in response["Content-Security-Policy"]


def test_plotly_is_served_locally(client: Client) -> None:
    """From the pinned package on this server (dashboard/staticfinders.py), with the same CSP: no CDN."""
    response = client.get("/static/vendor/plotly.min.js")
    assert response.status_code == 200
    assert "script-src 'self'" in response["Content-Security-Policy"]
