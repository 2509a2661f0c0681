"""The permission matrix on every alerts page and API endpoint, for every role and an
outsider; and the guard tests that fail when a new alerts page or endpoint skips the matrix.

Minimum roles are written out by hand: viewers read rules and channels (targets masked),
members manage rules (create, edit, delete, silence), admins manage channels (and send tests).
"""

from __future__ import annotations

import inspect
import json

import pytest

from greenops.alerts import channels
from greenops.alerts.models import Channel, Notification, Rule
from greenops.teams.permissions import MATRIX, ROLE_ORDER
from tests.support.alerts import RULE_FORM, make_rule
from tests.support.permissions import ROLES, _patterns

RULE_JSON = {"name": "Idle GPUs", "kind": "threshold", "kpi": "gpu_util_pct",
             "direction": "below", "fire_level": 10}

PAGES = [
    ("alerts", "get", "/teams/{slug}/alerts/", "viewer", 200, None),
    ("alert-new-form", "get", "/teams/{slug}/alerts/new/", "member", 200, None),
    ("alert-new", "post", "/teams/{slug}/alerts/new/", "member", 302, RULE_FORM),
    ("alert-rule", "get", "/teams/{slug}/alerts/{rule}/", "viewer", 200, None),
    ("alert-edit-form", "get", "/teams/{slug}/alerts/{rule}/edit/", "member", 200, None),
    ("alert-edit", "post", "/teams/{slug}/alerts/{rule}/edit/", "member", 302, RULE_FORM),
    ("alert-silence", "post", "/teams/{slug}/alerts/{rule}/silence/", "member", 302,
     {"hours": "4"}),
    ("alert-delete", "post", "/teams/{slug}/alerts/{rule}/delete/", "member", 302, {}),
    ("alert-channels", "get", "/teams/{slug}/alerts/channels/", "viewer", 200, None),
    ("alert-channel-new", "post", "/teams/{slug}/alerts/channels/new/", "admin", 200,
     {"name": "pager", "kind": "email", "target": "p@example.com"}),
    ("alert-channel-test", "post", "/teams/{slug}/alerts/channels/{channel}/test/", "admin",
     302, {}),
    ("alert-channel-test-status", "get",
     "/teams/{slug}/alerts/channels/{channel}/tests/{test}/", "viewer", 200, None),
    ("alert-channel-enable", "post", "/teams/{slug}/alerts/channels/{channel}/enable/",
     "admin", 302, {}),
    ("alert-channel-delete", "post", "/teams/{slug}/alerts/channels/{channel}/delete/",
     "admin", 302, {}),
]
API = [
    ("api-alerts", "get", "/api/v1/teams/{slug}/alerts", "viewer", 200, None),
    ("api-alert-new", "post", "/api/v1/teams/{slug}/alerts", "member", 201, RULE_JSON),
    ("api-alert", "get", "/api/v1/teams/{slug}/alerts/{rule}", "viewer", 200, None),
    ("api-alert-put", "put", "/api/v1/teams/{slug}/alerts/{rule}", "member", 200, RULE_JSON),
    ("api-alert-delete", "delete", "/api/v1/teams/{slug}/alerts/{rule}", "member", 204, None),
    ("api-alert-silence", "post", "/api/v1/teams/{slug}/alerts/{rule}/silence", "member", 200,
     {"until": "2030-01-01T00:00:00Z"}),
    ("api-alert-channels", "get", "/api/v1/teams/{slug}/alert-channels", "viewer", 200, None),
]
CASES = PAGES + API


@pytest.fixture
def things(team):
    ch, _ = channels.create(team, {"name": "oncall", "kind": "email",
                                   "target": "oncall@example.com"})
    rule = make_rule(team, [ch], name="Energy per inference")
    test = Notification.objects.create(channel=ch, kind="test", dedupe_key="test:perm",
                                       payload={"rule": "Test message"})
    return {"rule": rule.id, "channel": ch.id, "test": test.id}


def _call(client, method: str, path: str, body):
    if path.startswith("/api/"):
        if method == "get":
            return client.get(path)
        return getattr(client, method)(path, json.dumps(body or {}),
                                       content_type="application/json")
    return client.get(path) if method == "get" else client.post(path, body or {})


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_role_on_every_alerts_page_and_endpoint(client, team_roles, team, things, role,
                                                      case, mailoutbox):
    name, method, template, min_role, ok_status, body = case
    path = template.format(slug=team.slug, **things)
    client.force_login(team_roles[role])
    resp = _call(client, method, path, body)
    if role == "outsider":
        assert resp.status_code == 404, (name, resp.status_code)
    elif ROLE_ORDER.index(role) >= ROLE_ORDER.index(min_role):
        assert resp.status_code == ok_status, (name, role, resp.status_code)
    else:
        assert resp.status_code == 403, (name, role, resp.status_code)
        if path.startswith("/api/"):
            assert min_role in resp.json()["message"]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_anonymous_is_sent_to_login_or_401(client, team, things, case):
    name, method, template, *_, body = case
    path = template.format(slug=team.slug, **things)
    resp = _call(client, method, path, body)
    if path.startswith("/api/"):
        assert resp.status_code == 401, name
    else:
        assert resp.status_code == 302 and resp["Location"].startswith("/login/"), name


def test_refused_writes_change_nothing(client, team_roles, team, things):
    client.force_login(team_roles["viewer"])
    for name in ("alert-new", "alert-edit", "alert-silence", "alert-delete", "api-alert-new",
                 "api-alert-put", "api-alert-delete"):
        case = next(c for c in CASES if c[0] == name)
        path = case[2].format(slug=team.slug, **things)
        assert _call(client, case[1], path, case[5]).status_code == 403, name
    client.force_login(team_roles["member"])
    for name in ("alert-channel-new", "alert-channel-delete", "alert-channel-test"):
        case = next(c for c in CASES if c[0] == name)
        path = case[2].format(slug=team.slug, **things)
        assert _call(client, case[1], path, case[5]).status_code == 403, name
    rule = Rule.objects.get()
    assert (rule.name, rule.silenced_until) == ("Energy per inference", None)
    assert list(Channel.objects.values_list("name", flat=True)) == ["oncall"]
    assert not rule.notifications.exists()


def test_other_teams_rules_do_not_exist_for_you(client, team, other_team, users, things):
    theirs = make_rule(other_team, name="theirs")
    client.force_login(users["member"])
    assert client.get(f"/teams/vision/alerts/{theirs.id}/").status_code == 404
    assert client.get(f"/api/v1/teams/vision/alerts/{theirs.id}").status_code == 404
    assert [r["name"] for r in client.get("/api/v1/teams/vision/alerts").json()] == \
        ["Energy per inference"]


def test_every_alerts_page_is_guarded_and_tested():
    from greenops.alerts import urls

    covered = {c[2] for c in PAGES}
    for pattern in _patterns(urls.urlpatterns):
        route = "/teams/{slug}/" + str(pattern.pattern)
        action = getattr(pattern.callback, "permission_action", None)
        assert action in MATRIX, f"{route} is not guarded by team_permission"
        templ = route.replace("<int:rule_id>", "{rule}").replace("<int:channel_id>", "{channel}") \
            .replace("<int:notification_id>", "{test}")
        assert templ in covered, f"{route} has no permission test"


def test_every_alerts_endpoint_checks_the_matrix_and_is_tested():
    from greenops.alerts.api import router

    covered = {(c[1].upper(), c[2].removeprefix("/api/v1").replace("{rule}", "{rule_id}"))
               for c in API}
    seen = 0
    for path, view in router.path_operations.items():
        for op in view.operations:
            assert "authorize_api(" in inspect.getsource(op.view_func), path
            for method in op.methods:
                seen += 1
                assert (method, path) in covered, f"{method} {path} has no permission test"
    assert seen == len(API)
