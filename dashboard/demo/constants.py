"""Constants shared by the demo seed (`seed_demo`) and the login page's demo hint."""

from __future__ import annotations

import os
import secrets

from django.conf import settings

# The persona the login page suggests.
DEMO_USERNAME = "alice"
# The file that holds this workspace's demo password, under AIRBOARD_VAR_DIR.
DEMO_PASSWORD_FILE = "demo_password"  # noqa: S105 - a file name, not a password


def demo_password() -> str:
    """This workspace's demo password: random, made on first use and kept in var/ (mode 0600).

    A fixed password shipped in the source would open every deployment that ever seeded the
    demo (its `admin` is a superuser); one per workspace opens only the one it was printed for.
    """
    path = settings.VAR_DIR / DEMO_PASSWORD_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    password = secrets.token_urlsafe(12)
    with os.fdopen(fd, "w") as handle:
        handle.write(password)
    return password


def is_embedded_default() -> bool:
    """Whether this is the one-machine default (SQLite in var/), the only place the demo belongs."""
    return not settings.DATABASE_URL
