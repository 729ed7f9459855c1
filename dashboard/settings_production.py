"""Production settings: everything from `dashboard.settings`, hardened for HTTPS behind a proxy.

Use with `DJANGO_SETTINGS_MODULE=dashboard.settings_production`. It refuses to start without
DJANGO_SECRET_KEY (no key file made up under var/), forces DEBUG off, and turns on HTTPS-only
cookies, HSTS and the redirect to HTTPS, so that `manage.py check --deploy` passes clean.
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

# Before the base settings run: a missing DJANGO_SECRET_KEY must fail, not invent a key file.
os.environ.setdefault("AIRBOARD_REQUIRE_SECRET_KEY", "1")

from dashboard.kit.env import env_bool, env_int, env_str
from dashboard.settings import *  # noqa: F403
from dashboard.settings import PASSWORD_HASHERS

DEBUG = False

if not PASSWORD_HASHERS[0].endswith("Argon2PasswordHasher"):
    raise ImproperlyConfigured("Production hashes new passwords with Argon2: list it first in PASSWORD_HASHERS")

# --- HTTPS -------------------------------------------------------------------------------
# On by default: a plain-HTTP request is redirected. Off only where a proxy already redirects
# and talks plain HTTP to us without saying so (then set SECURE_PROXY_SSL_HEADER instead).
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
# The header a TLS-terminating proxy sets, as "HEADER,value", e.g. "X-Forwarded-Proto,https".
# Only set it when the proxy always overwrites that header: a client could send it otherwise.
_proxy_header = env_str("DJANGO_SECURE_PROXY_SSL_HEADER", "")
if _proxy_header:
    _name, _, _value = _proxy_header.partition(",")
    if not _name.strip() or not _value.strip():
        raise ImproperlyConfigured("DJANGO_SECURE_PROXY_SSL_HEADER must be 'Header-Name,value'")
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _name.strip().upper().replace("-", "_"), _value.strip())
# A year of HSTS, subdomains included; preload only marks the header, it enrolls nothing.
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31_536_000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", True)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# --- Cookies -------------------------------------------------------------------------------
SESSION_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SECURE = True
CSRF_COOKIE_HTTPONLY = True
