"""Scoped team API tokens on every read endpoint: who gets in, who gets 401/403/404, and why.

Every read API of a team answers a read token of that team; another team's token is 404 (the
team does not exist for it, as for an outsider's session); unknown, expired and revoked tokens
are 401; a read token on a write and an ingest token on a read are 403. Errors keep the API's one
{error, field, message} body.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from greenops.teams.models import ApiToken, AuditEvent

READS = [
    "/api/v1/teams/{slug}/kpis?range=day",
    "/api/v1/teams/{slug}/usage?range=day",
    "/api/v1/teams/{slug}/costs",
    "/api/v1/teams/{slug}/recommendations",
    "/api/v1/teams/{slug}/workloads",
    "/api/v1/teams/{slug}/hosts",
    "/api/v1/teams/{slug}/reports",
    "/api/v1/teams/{slug}/members",
    "/api/v1/teams/{slug}/metrics",
]


def _bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def _is_error(r, status: int, code: str) -> None:
    assert r.status_code == status, (r.status_code, r.content[:300])
    body = r.json()
    assert set(body) == {"error", "field", "message"} and body["error"] == code, body


@pytest.mark.parametrize("path", READS)
def test_read_token_reads_every_team_endpoint_and_other_tokens_do_not(client, team,
                                                                       other_team, path):
    _row, read = ApiToken.issue(team, "grafana", scope="read")
    _row, admin = ApiToken.issue(team, "ops", scope="admin")
    _row, theirs = ApiToken.issue(other_team, "theirs", scope="read")
    _row, ingest = ApiToken.issue(team, "triton", scope="ingest")
    url = path.format(slug=team.slug)
    assert client.get(url, **_bearer(read)).status_code == 200
    assert client.get(url, **_bearer(admin)).status_code == 200
    # Another team's read token: this team does not exist for it.
    _is_error(client.get(url, **_bearer(theirs)), 404, "not_found")
    # An inference server's token sends counts; it does not read the team's costs.
    _is_error(client.get(url, **_bearer(ingest)), 403, "forbidden")
    # No header and no session: 401 in the one error shape, with the Bearer challenge.
    r = client.get(url)
    _is_error(r, 401, "unauthorized")
    assert r["WWW-Authenticate"].startswith("Bearer")


def test_expired_and_revoked_tokens_are_refused_on_the_next_request(client, team):
    row, token = ApiToken.issue(team, "grafana", scope="read",
                                expires_at=timezone.now() + timedelta(hours=1))
    url = f"/api/v1/teams/{team.slug}/kpis"
    assert client.get(url, **_bearer(token)).status_code == 200
    ApiToken.objects.filter(id=row.id).update(expires_at=timezone.now() - timedelta(seconds=1))
    r = client.get(url, **_bearer(token))
    _is_error(r, 401, "unauthorized")
    assert "expired" in r.json()["message"]

    row2, token2 = ApiToken.issue(team, "notebook", scope="read")
    assert client.get(url, **_bearer(token2)).status_code == 200
    assert row2.revoke()
    r = client.get(url, **_bearer(token2))
    _is_error(r, 401, "unauthorized")
    assert "revoked" in r.json()["message"]
    _is_error(client.get(url, **_bearer("gha_" + "x" * 43)), 401, "unauthorized")


def test_read_token_on_a_write_is_403_and_changes_nothing(client, team):
    _row, read = ApiToken.issue(team, "grafana", scope="read")
    r = client.post(f"/api/v1/teams/{team.slug}/workloads", data={"name": "chat"},
                    content_type="application/json", **_bearer(read))
    _is_error(r, 403, "forbidden")
    assert "read" in r.json()["message"] and not team.workloads.exists()
    # Nor may it send measurements (ingest scope).
    doc = {"batch_id": str(uuid.uuid4()), "windows": []}
    r = client.post("/api/v1/inference", data=doc, content_type="application/json",
                    **_bearer(read))
    _is_error(r, 403, "forbidden")
    # Nor read the audit log, which is admin business.
    _is_error(client.get(f"/api/v1/teams/{team.slug}/audit", **_bearer(read)), 403, "forbidden")


def test_admin_token_registers_a_workload_and_the_audit_names_the_token(client, team):
    row, admin = ApiToken.issue(team, "terraform", scope="admin")
    r = client.post(f"/api/v1/teams/{team.slug}/workloads",
                    data={"name": "Chat API", "kind": "inference"},
                    content_type="application/json", **_bearer(admin))
    assert r.status_code == 201, r.content
    event = AuditEvent.objects.get(action=AuditEvent.Action.WORKLOAD_CREATED)
    assert event.actor is None and event.actor_label == f"token {row.prefix}"


def test_ingest_tokens_made_before_scopes_keep_sending(client, team):
    # A token issued without a scope is an ingest token, as every token was before scopes.
    from greenops.workloads.models import Workload

    Workload.objects.create(team=team, name="Chat", slug="chat", kind="inference")
    row, token = ApiToken.issue(team, "old")
    assert row.scope == "ingest"
    end = timezone.now().timestamp()
    doc = {"batch_id": str(uuid.uuid4()),
           "windows": [{"workload": "chat", "end": end, "requests": 10}]}
    r = client.post("/api/v1/inference", data=doc, content_type="application/json",
                    **_bearer(token))
    assert r.status_code == 202, r.content


def test_session_still_reads_and_last_used_is_recorded(client, users, team):
    client.force_login(users["member"])
    assert client.get(f"/api/v1/teams/{team.slug}/kpis").status_code == 200
    row, token = ApiToken.issue(team, "grafana", scope="read")
    assert row.last_used_at is None
    client.logout()
    assert client.get(f"/api/v1/teams/{team.slug}/hosts", **_bearer(token)).status_code == 200
    row.refresh_from_db()
    assert row.last_used_at is not None


def test_token_page_creates_a_scoped_expiring_token_shown_once(client, users, team):
    client.force_login(users["owner"])
    url = f"/teams/{team.slug}/api-tokens/"
    r = client.post(url, {"name": "grafana", "scope": "read", "expires_in_days": "30"})
    assert r.status_code == 200
    row = ApiToken.objects.get(team=team)
    assert row.scope == "read"
    # 30 days from now, give or take the request's own duration.
    assert abs((row.expires_at - timezone.now()) - timedelta(days=30)) < timedelta(minutes=1)
    token = r.context["new_token"]
    assert token.encode() in r.content
    page = client.get(url).content.decode()
    assert token not in page and "read" in page and row.expires_at.strftime("%Y-%m-%d") in page
    for bad in ({"name": "x", "scope": "root"}, {"name": "x", "expires_in_days": "0"},
                {"name": "x", "expires_in_days": "soon"}):
        assert client.post(url, bad).status_code == 400
    assert ApiToken.objects.count() == 1


def test_api_docs_show_curl_and_python_for_every_token_read(client):
    schema = client.get("/api/v1/openapi.json").json()
    for path in READS:
        op = schema["paths"][path.split("?")[0].replace("{slug}", "{slug}")]["get"]
        assert {"TeamAuth": []} in op["security"], path
        assert "curl -sS -X GET" in op["description"] and "requests.get(" in op["description"]
