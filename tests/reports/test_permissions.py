"""The permission matrix on every page and API endpoint of the reports app, for every role plus
an outsider. Minimum roles are written out by hand, as in tests/teams/test_permissions_apps.py."""

from __future__ import annotations

import inspect
import json

import pytest

from greenops.reports import generate
from greenops.reports.models import Report, Subscription
from greenops.reports.month_figures import Month
from greenops.teams.permissions import MATRIX, ROLE_ORDER
from tests.support.permissions import ROLES, _patterns

# (id, method, path, minimum role, status when allowed, body)
PAGES = [
    ("reports", "get", "/teams/{slug}/reports/", "viewer", 200, None),
    ("reports-generate", "post", "/teams/{slug}/reports/generate", "member", 302,
     {"month": "2026-08"}),
    ("reports-subscribe", "post", "/teams/{slug}/reports/subscription", "viewer", 302,
     {"subscribe": "1"}),
    ("report-detail", "get", "/teams/{slug}/reports/{report}/", "viewer", 200, None),
    ("report-status", "get", "/teams/{slug}/reports/{report}/status", "viewer", 200, None),
    ("report-pdf", "get", "/teams/{slug}/reports/{report}/report.pdf", "viewer", 200, None),
    ("report-csv", "get", "/teams/{slug}/reports/{report}/report.csv", "viewer", 200, None),
]
API = [
    ("api-reports", "get", "/api/v1/teams/{slug}/reports", "viewer", 200, None),
    ("api-report-new", "post", "/api/v1/teams/{slug}/reports", "member", 202,
     {"month": "2026-08"}),
    ("api-report", "get", "/api/v1/teams/{slug}/reports/{report}", "viewer", 200, None),
]
CASES = PAGES + API


@pytest.fixture
def report(team):
    r = generate.request(team, Month(2026, 7), enqueue=False)
    return generate.run(r.id)


def _call(client, method: str, path: str, body):
    if method == "get":
        return client.get(path)
    if path.startswith("/api/"):
        return client.post(path, json.dumps(body or {}), content_type="application/json")
    return client.post(path, body or {})


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_role_on_every_page_and_endpoint(client, team_roles, team, report, role, case):
    name, method, template, min_role, ok_status, body = case
    path = template.format(slug=team.slug, report=report.id)
    client.force_login(team_roles[role])
    resp = _call(client, method, path, body)
    if role == "outsider":
        assert resp.status_code == 404, (name, resp.status_code)
    elif ROLE_ORDER.index(role) >= ROLE_ORDER.index(min_role):
        assert resp.status_code == ok_status, (name, role, resp.status_code)
    else:
        assert resp.status_code == 403, (name, role, resp.status_code)
        if path.startswith("/api/"):
            assert resp.json()["error"] == "forbidden" and min_role in resp.json()["message"]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_anonymous_is_sent_to_login_or_401(client, team, report, case):
    name, method, template, *_, body = case
    path = template.format(slug=team.slug, report=report.id)
    resp = _call(client, method, path, body)
    if path.startswith("/api/"):
        assert resp.status_code == 401, name
    else:
        assert resp.status_code == 302 and resp["Location"].startswith("/login/"), name


def test_refused_generation_stores_nothing(client, team_roles, team):
    client.force_login(team_roles["viewer"])
    assert client.post(f"/teams/{team.slug}/reports/generate",
                       {"month": "2026-08"}).status_code == 403
    assert client.post(f"/api/v1/teams/{team.slug}/reports", json.dumps({"month": "2026-08"}),
                       content_type="application/json").status_code == 403
    assert not Report.objects.exists()


def test_outsider_cannot_subscribe_to_another_team(client, team_roles, team):
    client.force_login(team_roles["outsider"])
    assert client.post(f"/teams/{team.slug}/reports/subscription",
                       {"subscribe": "1"}).status_code == 404
    assert not Subscription.objects.exists()


@pytest.mark.parametrize(("role", "shown"), [("member", True), ("viewer", False)])
def test_page_offers_generation_only_to_members(client, team_roles, team, role, shown):
    client.force_login(team_roles[role])
    html = client.get(f"/teams/{team.slug}/reports/").content.decode()
    assert ('id="generate-form"' in html) is shown


def test_every_reports_page_is_guarded_and_tested():
    from greenops.reports import urls

    covered = {c[2].replace("/teams/{slug}/", "").split("{")[0] for c in PAGES}
    for pattern in _patterns(urls.urlpatterns):
        assert getattr(pattern.callback, "permission_action", None) in MATRIX, pattern.pattern
        assert str(pattern.pattern).split("<")[0] in covered, pattern.pattern


def test_every_reports_endpoint_checks_the_matrix_and_is_tested():
    from greenops.api.v1 import api

    covered = {(c[1].upper(), c[2].removeprefix("/api/v1")) for c in API}
    seen = 0
    for _prefix, router in api._routers:
        for path, view in router.path_operations.items():
            for op in view.operations:
                if op.view_func.__module__ != "greenops.reports.api":
                    continue
                # authorize_caller: the same matrix check for a session or a read token
                source = inspect.getsource(op.view_func)
                assert "authorize_api(" in source or "authorize_caller(" in source, path
                for method in op.methods:
                    seen += 1
                    assert (method, path.replace("{report_id}", "{report}")) in covered, path
    assert seen == len(API)
