"""Failed logins and enrollments are limited; successes and other clients are not affected."""

from __future__ import annotations

import random
import time
from types import SimpleNamespace

import pytest

from greenops import ratelimit


@pytest.fixture
def limits(settings, monkeypatch):
    settings.RATELIMIT_ENABLED = settings.AXES_ENABLED = True
    # Failures count in fixed windows (now // window): a test whose requests straddled a
    # boundary (:00, :15, :30, :45 with 900 s) saw its count start again and failed. The
    # limiter's clock stands still in the middle of a window instead.
    frozen = (time.time() // 900) * 900 + 450
    monkeypatch.setattr(ratelimit, "time", SimpleNamespace(time=lambda: frozen))
    settings.RATELIMIT_LOGIN_FAILURES = 3
    settings.RATELIMIT_ENROLL_FAILURES = 2
    settings.RATELIMIT_WINDOW_S = 900
    return settings


def _ip() -> str:
    # A fresh TEST-NET address per test: counters of earlier runs (in Redis) never apply.
    return f"2001:db8::{random.randint(1, 0xffff):x}:{random.randint(1, 0xffff):x}"


def test_login_locks_after_failures_for_that_username_and_address(client, users, limits):
    ip = _ip()
    for i in range(3):
        r = client.post("/login/", {"username": "owner", "password": "wrong"}, REMOTE_ADDR=ip)
        # The form again with the mismatch message; the third failure reaches the limit.
        assert r.status_code == (200 if i < 2 else 429)
    r = client.post("/login/", {"username": "owner", "password": "pw-owner"}, REMOTE_ADDR=ip)
    assert r.status_code == 429  # even the right password: the window is closed
    assert 1 <= int(r["Retry-After"]) <= 900
    assert b"Too many failed attempts" in r.content
    # The address is locked for every username, and the username from every address (issue
    # 30: the limit was per address and username together, so a spray was never stopped).
    r = client.post("/login/", {"username": "member", "password": "pw-member"}, REMOTE_ADDR=ip)
    assert r.status_code == 429
    r = client.post("/login/", {"username": "owner", "password": "pw-owner"},
                    REMOTE_ADDR=_ip())
    assert r.status_code == 429
    # Another username from another address is untouched.
    r = client.post("/login/", {"username": "member", "password": "pw-member"},
                    REMOTE_ADDR=_ip())
    assert r.status_code == 302


def test_one_password_sprayed_over_usernames_locks_the_address(client, users, limits):
    ip = _ip()
    for name in ("alice", "bob"):  # one failure each for two usernames
        r = client.post("/login/", {"username": name, "password": "Winter2026!"},
                        REMOTE_ADDR=ip)
        assert r.status_code == 200
    # The third username is the address's third failure: locked, and so is the next one.
    for name in ("carol", "dave"):
        r = client.post("/login/", {"username": name, "password": "Winter2026!"},
                        REMOTE_ADDR=ip)
        assert r.status_code == 429


def test_a_spray_from_many_addresses_meets_the_global_rate(client, users, limits):
    from axes.models import AccessFailureLog

    limits.RATELIMIT_LOGIN_GLOBAL_PER_MIN = 5
    for i in range(5):  # five addresses, five usernames: no address or username at its limit
        r = client.post("/login/", {"username": f"user{i}", "password": "Winter2026!"},
                        REMOTE_ADDR=_ip())
        assert r.status_code == 200
    assert AccessFailureLog.objects.count() == 5  # in PostgreSQL: Redis down changes nothing
    r = client.post("/login/", {"username": "owner", "password": "pw-owner"}, REMOTE_ADDR=_ip())
    assert r.status_code == 429 and r["Retry-After"] == "60"


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
    # Locked: one request per probe interval is still checked (a 401 for this bad token) ...
    r = client.post("/api/v1/enroll", {"token": "gen_guess", "hostname": "h"},
                    content_type="application/json", REMOTE_ADDR=ip)
    assert r.status_code == 401
    # ... the rest are refused unseen.
    r = client.post("/api/v1/enroll", {"token": "gen_guess", "hostname": "h"},
                    content_type="application/json", REMOTE_ADDR=ip)
    assert r.status_code == 429
    assert r.json() == {"error": "rate_limited", "field": "token",
                        "message": r.json()["message"]}
    assert int(r["Retry-After"]) >= 1
    r = client.post("/api/v1/enroll", {"token": "gen_guess", "hostname": "h"},
                    content_type="application/json", REMOTE_ADDR=_ip())
    assert r.status_code == 401  # another address is not locked out


def test_a_locked_address_still_enrolls_with_a_valid_token(client, team, users, limits):
    """Hosts behind one NAT address: another's bad tokens lock the address, yet one request
    per RATELIMIT_LOCKED_PROBE_S is still checked, so a valid token enrolls (issue 30)."""
    from django.core.cache import cache

    from greenops.telemetry import enrollment

    ip = _ip()
    body = {"token": "gen_guess", "hostname": "h", "gpus": [{"index": 0}]}
    for _ in range(2):
        assert client.post("/api/v1/enroll", body, content_type="application/json",
                           REMOTE_ADDR=ip).status_code == 401
    # Locked: the next request is the window's probe (checked: still a bad token, 401), the
    # one after is refused unseen, 429 with the probe interval as Retry-After.
    assert client.post("/api/v1/enroll", body, content_type="application/json",
                       REMOTE_ADDR=ip).status_code == 401
    r = client.post("/api/v1/enroll", body, content_type="application/json", REMOTE_ADDR=ip)
    assert r.status_code == 429 and r["Retry-After"] == str(limits.RATELIMIT_LOCKED_PROBE_S)
    # The next probe interval: a valid token from the same address enrolls.
    cache.delete(f"ratelimit:enroll:probe:{ip}")
    token = enrollment.issue_enrollment_token(team, users["owner"])[1]
    r = client.post("/api/v1/enroll", {**body, "token": token}, content_type="application/json",
                    REMOTE_ADDR=ip)
    assert r.status_code == 201, r.content
