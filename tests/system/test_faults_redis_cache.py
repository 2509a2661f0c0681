"""Redis is a cache, never a gate (issue 30): with the cache's Redis unreachable, login (and its
failed-attempt limit), enroll, the team home and API reads answer as usual -- no 500 -- because
greenops.cache.FailSoftRedisCache answers from process memory. The live stack's walk
(tests/system/test_faults_live.py) does the same against a real stopped redis-server; this one
runs in seconds against a port nothing listens on."""

from __future__ import annotations

import pytest

from tests.support.agent_fakes import free_port
from tests.support.factories import make_host


@pytest.fixture
def redis_down(settings):
    """The default cache pointed at a loopback port with no listener (connection refused)."""
    from django.core.cache import caches

    settings.CACHES = {"default": {"BACKEND": "greenops.cache.FailSoftRedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{free_port()}/0"}}
    cache = caches["default"]
    assert type(cache).__name__ == "FailSoftRedisCache"
    return cache


def test_cache_answers_from_memory_while_redis_is_down(redis_down, caplog):
    cache = redis_down
    assert cache.get("k") is None
    assert cache.add("k", 1, 60) is True and cache.add("k", 1, 60) is False
    assert cache.incr("k") == 2
    assert cache.get_many(["k", "x"]) == {"k": 2}
    assert cache.degraded
    # Logged once for the outage, not once per call.
    assert sum("Redis cache unreachable" in r.getMessage() for r in caplog.records) == 1


def test_login_pages_and_api_reads_without_redis(client, team, redis_down, settings):
    settings.RATELIMIT_ENABLED = settings.AXES_ENABLED = True
    settings.RATELIMIT_LOGIN_FAILURES = 2
    make_host(team)
    ip = "2001:db8::30:1"
    for i in range(2):
        r = client.post("/login/", {"username": "owner", "password": "wrong"}, REMOTE_ADDR=ip)
        assert r.status_code == (200 if i == 0 else 429)  # the second reaches the limit
    # The limit still holds: django-axes counts in PostgreSQL.
    r = client.post("/login/", {"username": "owner", "password": "pw-owner"}, REMOTE_ADDR=ip)
    assert r.status_code == 429 and int(r["Retry-After"]) >= 1
    r = client.post("/login/", {"username": "member", "password": "pw-member"},
                    REMOTE_ADDR="2001:db8::30:2")
    assert r.status_code == 302
    for url in (f"/teams/{team.slug}/", "/api/v1/teams", f"/api/v1/teams/{team.slug}/hosts",
                f"/api/v1/teams/{team.slug}/usage", f"/api/v1/teams/{team.slug}/kpis"):
        r = client.get(url)
        assert r.status_code == 200, (url, r.status_code, r.content[:300])
    r = client.post("/api/v1/enroll", {"token": "gen_guess", "hostname": "h", "gpus": [{}]},
                    content_type="application/json", REMOTE_ADDR=ip)
    assert r.status_code == 401


def test_pages_that_queue_a_task_still_answer_with_the_broker_down(
        team, users, settings, monkeypatch, django_capture_on_commit_callbacks, caplog):
    """An invitation's mail and a report are rows first; a broker that refuses the message
    (kombu's OperationalError, as a stopped Redis gives) leaves the row for its sweep."""
    import kombu.exceptions

    from greenops.reports import generate
    from greenops.reports.month_figures import Month
    from greenops.reports.tasks import generate_report
    from greenops.teams import invitations
    from greenops.teams.models import Invitation
    from greenops.teams.tasks import send_invitation

    def refuse(*args, **kwargs):
        raise kombu.exceptions.OperationalError("Error 111 connecting to 127.0.0.1. Refused.")

    monkeypatch.setattr(send_invitation, "delay", refuse)
    monkeypatch.setattr(generate_report, "delay", refuse)
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    with django_capture_on_commit_callbacks(execute=True):
        inv, _ = invitations.invite(team, users["owner"], "new@example.com", "member")
        report = generate.request(team, Month(2026, 11))
    assert Invitation.objects.get(id=inv.id).mail_status == Invitation.Mail.QUEUED
    assert report.status == "pending"
    assert sum("could not queue" in r.getMessage() for r in caplog.records) == 2
