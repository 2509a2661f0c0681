"""POST /api/v1/samples skips the browser middleware (greenops.api.fastpath): no session, CSRF,
auth, messages or static-file middleware runs for it, SecurityMiddleware's headers still do, and
every other request -- another method on the same path included -- takes the whole stack."""

from __future__ import annotations

from unittest import mock

import pytest
from django.conf import settings
from django.contrib.sessions.middleware import SessionMiddleware
from django.middleware.csrf import CsrfViewMiddleware

from tests.support.factories import make_batch


def refuse(*args, **kwargs):
    raise AssertionError("browser middleware ran")


def test_it_sits_right_after_security_middleware():
    stack = settings.MIDDLEWARE  # behind only the error shape (greenops/api/errorshape.py)
    assert stack[:3] == ["greenops.api.errorshape.ApiErrorShape",
                         "django.middleware.security.SecurityMiddleware",
                         "greenops.api.fastpath.SamplesFastPath"]


@pytest.mark.django_db
def test_a_batch_skips_the_browser_middleware_and_keeps_the_security_headers(host, post_batch):
    _, token = host
    with mock.patch.object(SessionMiddleware, "process_request", refuse), \
            mock.patch.object(CsrfViewMiddleware, "process_request", refuse):
        r = post_batch(token, make_batch())
    assert r.status_code == 202 and r.json()["status"] == "queued"
    assert r["X-Content-Type-Options"] == "nosniff"  # SecurityMiddleware still ran
    assert int(r["Content-Length"]) == len(r.content)
    assert "X-Frame-Options" not in r and "Set-Cookie" not in r.headers


@pytest.mark.django_db
def test_errors_on_the_fast_path_are_the_house_errors(host, post_batch):
    r = post_batch("gho_not-a-token", make_batch())
    assert r.status_code == 401
    assert r.json()["field"] == "Authorization" and r["WWW-Authenticate"].startswith("Bearer")
    _, token = host
    r = post_batch(token, {"batch_id": "x"})
    assert r.status_code == 422 and r.json()["error"] and r.json()["field"]


@pytest.mark.django_db
def test_other_requests_take_the_whole_stack(client):
    with mock.patch.object(SessionMiddleware, "process_request", refuse), \
            pytest.raises(AssertionError, match="browser middleware ran"):
        client.get("/api/v1/samples")
    r = client.get("/api/v1/samples")  # not POST: the full stack, which answers 405
    assert r.status_code == 405 and r["X-Frame-Options"] == "DENY"


@pytest.mark.django_db
def test_the_fast_path_answers_without_ninjas_dispatch(host, post_batch):
    from ninja.operation import Operation

    _, token = host
    with mock.patch.object(Operation, "run", refuse):
        assert post_batch(token, make_batch()).status_code == 202
        r = post_batch("gho_not-a-token", make_batch())
    assert r.status_code == 401 and r.json()["field"] == "Authorization"


@pytest.mark.django_db
def test_without_the_fast_path_the_api_answers_the_same(host, post_batch, settings):
    """The documented operation (v1.post_samples) serves the endpoint where MIDDLEWARE lacks
    the fast path, with the same answers."""
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if "fastpath" not in m]
    _, token = host
    doc = make_batch()
    r = post_batch(token, doc)
    assert r.status_code == 202 and r.json() == {"batch_id": doc["batch_id"], "samples": 10,
                                                 "status": "queued"}
    assert r["X-Frame-Options"] == "DENY"  # the whole stack ran
    r = post_batch("gho_not-a-token", make_batch())
    assert r.status_code == 401 and r.json()["field"] == "Authorization"
    r = post_batch(token, {"batch_id": "x"})
    assert r.status_code == 422 and r.json()["field"] == "batch_id"
