"""The permission matrix, and every page and API endpoint of issue 4 checked for every role.

Expected minimum roles are written out here by hand (not read from MATRIX), so a change to the
policy has to be made twice: once in permissions.py and once, deliberately, here.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from greenops.teams.permissions import MATRIX, ROLE_ORDER, allowed_actions, allows, rank
from tests.support.permissions import ROLES, _patterns


def test_matrix_says_what_the_issue_says():
    viewer = allowed_actions("viewer")
    assert viewer == {"team.view", "hosts.view", "members.view"}  # viewers read
    assert allowed_actions("member") - viewer == {"alerts.manage", "reports.manage",
                                                  "runs.upload", "benchmarks.acknowledge",
                                                  "variants.manage"}
    assert allowed_actions("admin") - allowed_actions("member") == {
        "hosts.manage", "workloads.manage", "channels.manage", "tokens.manage", "audit.view",
        "prices.manage", "sites.manage"}  # issue 9: prices and sites are team setup
    assert allowed_actions("owner") - allowed_actions("admin") == {"members.manage",
                                                                   "team.manage",
                                                                   "hosts.delete_history"}
    assert allowed_actions(None) == set()
    assert allowed_actions("superuser") == set()  # an unknown role gets nothing
    assert ROLE_ORDER == ("viewer", "member", "admin", "owner")
    assert rank("owner") == 3 and rank(None) == -1


def test_unknown_action_is_a_bug_not_a_no():
    with pytest.raises(KeyError):
        allows("owner", "hosts.manag")


# (id, method, path, minimum role, status when allowed, body)
PAGES = [
    ("members", "get", "/teams/{slug}/members/", "viewer", 200, None),
    ("invite", "post", "/teams/{slug}/members/", "owner", 302,
     {"email": "new@example.com", "role": "member"}),
    ("change-role", "post", "/teams/{slug}/members/{viewer_m}/role", "owner", 302,
     {"role": "member"}),
    ("remove-member", "post", "/teams/{slug}/members/{viewer_m}/remove", "owner", 302, {}),
    ("withdraw-invitation", "post", "/teams/{slug}/members/invitations/{inv}/withdraw", "owner",
     302, {}),
    ("resend-invitation", "post", "/teams/{slug}/members/invitations/{inv}/resend", "owner",
     302, {}),
    ("team-settings", "get", "/teams/{slug}/settings/", "owner", 200, None),
    ("rename-team", "post", "/teams/{slug}/settings/", "owner", 302, {"name": "Vision 2"}),
    ("team-time-zone", "post", "/teams/{slug}/settings/time-zone", "owner", 302,
     {"time_zone": "Europe/Paris"}),
    ("delete-team", "post", "/teams/{slug}/settings/delete", "owner", 302, {"confirm": "Vision"}),
    ("permissions", "get", "/teams/{slug}/permissions/", "viewer", 200, None),
    ("audit", "get", "/teams/{slug}/audit/", "admin", 200, None),
    ("hosts", "get", "/teams/{slug}/hosts/", "viewer", 200, None),
    ("add-host-form", "get", "/teams/{slug}/hosts/add/", "admin", 200, None),
    ("add-host", "post", "/teams/{slug}/hosts/add/", "admin", 200, {}),
    ("revoke", "post", "/teams/{slug}/hosts/{host}/revoke", "admin", 302, {}),
    ("rotate", "post", "/teams/{slug}/hosts/{host}/rotate", "admin", 200, {}),
    ("remove-host", "post", "/teams/{slug}/hosts/{host}/remove", "admin", 302, {}),
    ("delete-host", "post", "/teams/{slug}/hosts/{host}/delete", "owner", 302,
     {"confirm": "gpu-node-1"}),
]
API = [
    ("api-hosts", "get", "/api/v1/teams/{slug}/hosts", "viewer", 200, None),
    ("api-enroll-token", "post", "/api/v1/teams/{slug}/enrollment-tokens", "admin", 201, {}),
    ("api-revoke", "post", "/api/v1/teams/{slug}/hosts/{host}/revoke", "admin", 200, {}),
    ("api-rotate", "post", "/api/v1/teams/{slug}/hosts/{host}/rotate", "admin", 200, {}),
    ("api-remove", "delete", "/api/v1/teams/{slug}/hosts/{host}", "admin", 200, None),
    ("api-members", "get", "/api/v1/teams/{slug}/members", "viewer", 200, None),
    ("api-invite", "post", "/api/v1/teams/{slug}/invitations", "owner", 201,
     {"email": "new@example.com", "role": "viewer"}),
    ("api-audit", "get", "/api/v1/teams/{slug}/audit", "admin", 200, None),
]


def _invitation(team) -> int:
    from greenops.teams.models import Invitation

    return Invitation.objects.create(team=team, email="pending@example.com", token_hash="0" * 64,
                                     expires_at=timezone.now() + timedelta(days=1)).id


def _path(template: str, team, host, roles) -> str:
    viewer_m = team.memberships.get(user=roles["viewer"]).id
    inv = _invitation(team) if "{inv}" in template else None
    return template.format(slug=team.slug, host=host.id, viewer_m=viewer_m, inv=inv)


def _call(client, method: str, path: str, body, *, api: bool):
    if method == "get":
        return client.get(path)
    if method == "delete":
        return client.delete(path)
    if api:
        return client.post(path, json.dumps(body or {}), content_type="application/json")
    return client.post(path, body or {})


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("case", PAGES + API, ids=[c[0] for c in PAGES + API])
def test_every_role_on_every_page_and_endpoint(client, team_roles, team, host, role, case):
    name, method, template, min_role, ok_status, body = case
    path = _path(template, team, host[0], team_roles)
    client.force_login(team_roles[role])
    resp = _call(client, method, path, body, api=path.startswith("/api/"))
    if role == "outsider":
        assert resp.status_code == 404, (name, resp.status_code)  # not even its existence
    elif ROLE_ORDER.index(role) >= ROLE_ORDER.index(min_role):
        assert resp.status_code == ok_status, (name, role, resp.status_code)
    else:
        assert resp.status_code == 403, (name, role, resp.status_code)
        if path.startswith("/api/"):
            assert resp.json()["error"] == "forbidden"


@pytest.mark.parametrize("case", PAGES + API, ids=[c[0] for c in PAGES + API])
def test_anonymous_is_sent_to_login_or_401(client, team, host, case):
    name, method, template, *_ = case
    path = template.format(slug=team.slug, host=host[0].id, viewer_m=1, inv=1)
    resp = _call(client, method, path, case[5], api=path.startswith("/api/"))
    if path.startswith("/api/"):
        assert resp.status_code == 401, name
    else:
        assert resp.status_code == 302 and resp["Location"].startswith("/login/"), name




def test_every_team_page_is_guarded_by_the_matrix():
    """A new view in greenops/teams/urls.py without @team_permission fails here."""
    from greenops.teams import urls

    for pattern in _patterns(urls.urlpatterns):
        action = getattr(pattern.callback, "permission_action", None)
        assert action in MATRIX, f"{pattern.pattern} is not guarded by team_permission"


def test_case_list_covers_every_team_page():
    from greenops.teams import urls

    covered = {c[2].replace("/teams/{slug}/", "").split("{")[0] for c in PAGES}
    for pattern in _patterns(urls.urlpatterns):
        prefix = str(pattern.pattern).split("<")[0]
        assert prefix in covered, f"{pattern.pattern} has no permission test"


def test_permissions_page_renders_the_matrix(client, team_roles, team):
    client.force_login(team_roles["viewer"])
    html = client.get(f"/teams/{team.slug}/permissions/").content.decode()
    for action in MATRIX:
        assert f"<code>{action}</code>" in html
    # members.manage row: viewer, member, admin cannot; owner can.
    row = html.split("<code>members.manage</code>")[1].split("</tr>")[0]
    assert row.count("✓") == 1 and row.count("–") == 3


def test_permissions_api(client, team_roles):
    client.force_login(team_roles["viewer"])
    doc = client.get("/api/v1/permissions").json()
    assert doc["roles"] == ["viewer", "member", "admin", "owner"]
    hosts_manage = next(r for r in doc["actions"] if r["action"] == "hosts.manage")
    assert hosts_manage["roles"] == [False, False, True, True]


def test_a_team_page_reads_the_users_memberships_once(client, users, team, other_team):
    """The access check and the header's team switcher share one query of the user's
    memberships (with their teams), and the switcher still lists every team of the user."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from greenops.teams.models import Membership

    Membership.objects.get_or_create(team=other_team, user=users["member"],
                                     defaults={"role": "viewer"})
    client.force_login(users["member"])
    with CaptureQueriesContext(connection) as queries:
        html = client.get(f"/teams/{team.slug}/members/").content.decode()
    assert sum('FROM "teams_membership"' in q["sql"] and 'JOIN "teams_team"' in q["sql"]
               for q in queries.captured_queries) == 1
    assert f'href="/teams/{team.slug}/"' in html and f'href="/teams/{other_team.slug}/"' in html
    # Another team's page for someone not in it is still a 404.
    client.force_login(users["outsider"])
    assert client.get(f"/teams/{team.slug}/members/").status_code == 404
