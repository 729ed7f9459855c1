"""Login lockout: repeated failures for one username from one address answer 429 with Retry-After."""

from __future__ import annotations

import pytest
from axes.models import AccessAttempt
from django.core.cache import cache
from django.test import Client

from tests.conftest import PASSWORD, World


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    cache.clear()


def _login(client: Client, username: str, password: str, ip: str = "198.51.100.1"):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=ip)


def test_five_failures_lock_the_username_for_that_address(world: World, settings) -> None:
    client = Client()
    # The fifth failure already answers 429 (django-axes locks at the failure that reaches the limit).
    assert [_login(client, "alice", "wrong").status_code for _ in range(5)] == [200] * 4 + [429]
    locked = _login(client, "alice", PASSWORD)
    # Even the right password is not checked while locked: guessing gains nothing.
    assert locked.status_code == 429
    assert 1 <= int(locked["Retry-After"]) <= settings.AIRBOARD_LOGIN_WINDOW_SECONDS
    assert "_auth_user_id" not in client.session


def test_the_lock_is_per_username_and_address(world: World) -> None:
    for _ in range(5):
        _login(Client(), "alice", "wrong")
    # alice from her own address, and bob from the attacker's, still log in.
    assert _login(Client(), "alice", PASSWORD, ip="192.0.2.10").status_code == 302
    assert _login(Client(), "bob", PASSWORD).status_code == 302


def test_username_case_does_not_reset_the_count(world: World) -> None:
    for name in ["alice", "ALICE", "Alice", "aLiCe", "alicE"]:
        _login(Client(), name, "wrong")
    assert _login(Client(), "alice", "wrong").status_code == 429


def test_spraying_many_usernames_from_one_address_is_limited(world: World, settings) -> None:
    settings.AIRBOARD_LOGIN_FAILURES_PER_IP = 3
    for i in range(3):
        assert _login(Client(), f"user{i}", "wrong").status_code == 200
    assert _login(Client(), "bob", PASSWORD).status_code == 429


def test_successful_logins_do_not_count(world: World) -> None:
    for _ in range(6):
        assert _login(Client(), "alice", PASSWORD).status_code == 302


def _admin_login(client: Client, username: str, password: str, ip: str = "198.51.100.1"):
    return client.post("/admin/login/", {"username": username, "password": password, "next": "/admin/"}, REMOTE_ADDR=ip)


def test_the_admin_login_is_locked_too_and_the_count_is_shared(world: World) -> None:
    # The reproduction: /admin/login/ had no lockout. Failures on either form count
    # together, in the database every web process shares (django-axes' AccessAttempt).
    for _ in range(3):
        assert _admin_login(Client(), "sam", "wrong").status_code == 200
    assert _login(Client(), "sam", "wrong").status_code == 200
    locked = _admin_login(Client(), "sam", "wrong")
    assert locked.status_code == 429 and locked["Retry-After"]
    assert _admin_login(Client(), "sam", PASSWORD).status_code == 429  # the right password is not checked
    assert _login(Client(), "sam", PASSWORD).status_code == 429
    assert AccessAttempt.objects.get(username="sam", ip_address="198.51.100.1").failures_since_start >= 5
    # From elsewhere, sam still logs in to the admin.
    assert _admin_login(Client(), "sam", PASSWORD, ip="192.0.2.20").status_code == 302
