"""Failed logins and enrollments are limited; successes and other clients are not affected."""

from __future__ import annotations

import random

import pytest


@pytest.fixture
def limits(settings):
    settings.RATELIMIT_ENABLED = True
    settings.RATELIMIT_LOGIN_FAILURES = 3
    settings.RATELIMIT_ENROLL_FAILURES = 2
    settings.RATELIMIT_WINDOW_S = 900
    return settings


def _ip() -> str:
    # A fresh TEST-NET address per test: counters of earlier runs (in Redis) never apply.
    return f"2001:db8::{random.randint(1, 0xffff):x}:{random.randint(1, 0xffff):x}"


def test_login_locks_after_failures_for_that_username_and_address(client, users, limits):
    ip = _ip()
    for _ in range(3):
        r = client.post("/login/", {"username": "owner", "password": "wrong"}, REMOTE_ADDR=ip)
        assert r.status_code == 200  # the form again, with the mismatch message
    r = client.post("/login/", {"username": "owner", "password": "pw-owner"}, REMOTE_ADDR=ip)
    assert r.status_code == 429  # even the right password: the window is closed
    assert 1 <= int(r["Retry-After"]) <= 900
    assert b"Too many failed attempts" in r.content
    # Another username from the same address, and the same username elsewhere, still log in.
    r = client.post("/login/", {"username": "member", "password": "pw-member"}, REMOTE_ADDR=ip)
    assert r.status_code == 302
    r = client.post("/login/", {"username": "owner", "password": "pw-owner"},
                    REMOTE_ADDR=_ip())
    assert r.status_code == 302


def test_successful_logins_are_never_counted(client, users, limits):
    ip = _ip()
    for _ in range(5):
        r = client.post("/login/", {"username": "owner", "password": "pw-owner"}, REMOTE_ADDR=ip)
        assert r.status_code == 302
        client.logout()


def test_enroll_locks_an_address_after_failed_tokens(client, db, limits):
    ip = _ip()
    for _ in range(2):
        r = client.post("/api/v1/enroll", {"token": "gen_guess", "hostname": "h"},
                        content_type="application/json", REMOTE_ADDR=ip)
        assert r.status_code == 401
    r = client.post("/api/v1/enroll", {"token": "gen_guess", "hostname": "h"},
                    content_type="application/json", REMOTE_ADDR=ip)
    assert r.status_code == 429
    assert r.json() == {"error": "rate_limited", "field": "token",
                        "message": r.json()["message"]}
    assert int(r["Retry-After"]) >= 1
    r = client.post("/api/v1/enroll", {"token": "gen_guess", "hostname": "h"},
                    content_type="application/json", REMOTE_ADDR=_ip())
    assert r.status_code == 401  # another address is not locked out
