"""The 403, 404, 500 and CSRF-failure pages with DEBUG off (as in production): styled like the
site, and each says what to do next. The 500 page renders without the database."""

from __future__ import annotations

import logging

import pytest
from django.db import OperationalError
from django.test import Client, RequestFactory
from django.urls import path

from greenops.urls import server_error
from greenops.urls import urlpatterns as site_patterns


def boom(request):
    raise RuntimeError("a bug")


def database_down(request):
    # What psycopg raises through Django when PostgreSQL is stopped (the live walk in
    # tests/system/test_faults_live.py meets the real one).
    raise OperationalError('connection to server at "127.0.0.1", port 5432 failed: '
                           "Connection refused")


# This module is the URLconf of the 500 test: the site's routes plus views that fail.
urlpatterns = [*site_patterns, path("boom/", boom), path("db-down/", database_down)]
handler500 = server_error


@pytest.mark.django_db
def test_a_role_too_low_gets_the_styled_403_naming_the_way_out(client, team, users, settings):
    settings.DEBUG = False
    client.force_login(users["member"])  # workloads.create needs the admin role
    resp = client.get(f"/teams/{team.slug}/workloads/new/")
    assert resp.status_code == 403
    body = resp.content.decode()
    assert 'data-status="403"' in body and "greenops.css" in body
    assert "needs the admin role" in body
    assert "sign in as another user" in body
    assert f'href="/teams/{team.slug}/members/"' in body  # who the admins are
    assert 'href="/"' in body  # your teams


@pytest.mark.django_db
def test_a_team_you_are_not_in_gets_the_styled_404_not_its_existence(client, team, users, settings):
    settings.DEBUG = False
    client.force_login(users["outsider"])  # not in Vision: 404, its existence is not revealed
    resp = client.get(f"/teams/{team.slug}/kpis/")
    assert resp.status_code == 404
    body = resp.content.decode()
    assert 'data-status="404"' in body and "greenops.css" in body
    assert "your teams" in body and "0 teams" in body
    assert "ask one of that team's admins to invite you" in body


@pytest.mark.django_db
def test_an_unknown_address_gets_the_styled_404(client, users, settings):
    settings.DEBUG = False
    client.force_login(users["owner"])
    resp = client.get("/no-such-page/")
    assert resp.status_code == 404
    assert "/no-such-page/" in resp.content.decode()


@pytest.mark.django_db
def test_a_form_sent_without_its_csrf_token_gets_the_styled_csrf_page(settings):
    settings.DEBUG = False
    client = Client(enforce_csrf_checks=True)
    resp = client.post("/login/", {"username": "owner", "password": "pw-owner"})
    assert resp.status_code == 403
    body = resp.content.decode()
    assert "This form could not be sent" in body and "greenops.css" in body
    assert "reload the page" in body
    assert "CSRF verification failed" not in body  # Django's bare page


def test_the_500_page_renders_without_the_database_and_logs_its_reference(settings, caplog):
    # No `db` fixture: any query here raises, so this proves the page needs no database.
    settings.DEBUG = False
    settings.ROOT_URLCONF = __name__
    client = Client(raise_request_exception=False)
    with caplog.at_level(logging.ERROR, logger="greenops.errors"):
        resp = client.get("/boom/")
    assert resp.status_code == 500
    body = resp.content.decode()
    assert 'data-status="500"' in body and "greenops.css" in body
    logged = [r for r in caplog.records if r.name == "greenops.errors"]
    assert len(logged) == 1 and logged[0].exc_info[0] is RuntimeError
    reference = logged[0].args[0]
    assert len(reference) == 8 and f"<code>{reference}</code>" in body


def test_the_500_view_alone_needs_no_request_context():
    resp = server_error(RequestFactory().get("/anything"))
    assert resp.status_code == 500 and b"Something went wrong" in resp.content


def test_a_database_that_is_down_is_a_503_that_says_so_not_a_500(settings, caplog):
    settings.DEBUG = False
    settings.ROOT_URLCONF = __name__
    client = Client(raise_request_exception=False)
    with caplog.at_level(logging.WARNING, logger="greenops.errors"):
        resp = client.get("/db-down/")
    assert resp.status_code == 503 and resp["Retry-After"] == "5"
    body = resp.content.decode()
    assert "GreenOps cannot reach its database" in body and 'data-status="503"' in body
    assert "no measurement is lost" in body and "greenops.css" in body
    logged = [r for r in caplog.records if r.name == "greenops.errors"]
    # A part that is down is a warning with its cause, not an error with a traceback.
    assert len(logged) == 1 and logged[0].levelno == logging.WARNING and not logged[0].exc_info
    assert f"<code>{logged[0].args[0]}</code>" in body
