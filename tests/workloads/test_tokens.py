"""Team API tokens: issuing, resolving, revoking, and the admin page that manages them."""

from __future__ import annotations

import pytest

from greenops.teams.models import ApiToken, Role, team_for_api_token


def test_issued_token_resolves_to_its_team_and_only_the_hash_is_kept(team):
    row, token = ApiToken.issue(team, "ci")
    assert token.startswith("gha_") and len(token) > 40
    assert token not in (row.token_hash, row.prefix) and row.prefix == token[:10]
    assert team_for_api_token(token) == team
    row.refresh_from_db()
    assert row.last_used_at is not None


@pytest.mark.parametrize("bad", [None, "", "gha_nope", "gho_hosttoken", "x" * 60])
def test_unknown_tokens_resolve_to_nothing(team, bad):
    ApiToken.issue(team, "ci")
    assert team_for_api_token(bad) is None


def test_revoked_token_stops_working_and_revoking_twice_is_harmless(team):
    row, token = ApiToken.issue(team, "ci")
    assert row.revoke() is True
    assert row.revoke() is False
    assert team_for_api_token(token) is None


def _login(client, users, name):
    client.force_login(users[name])


def test_owner_creates_token_shown_once_then_revokes_it(client, users, team):
    _login(client, users, "owner")
    url = f"/teams/{team.slug}/api-tokens/"
    r = client.post(url, {"name": "inference app"})
    assert r.status_code == 200
    row = ApiToken.objects.get(team=team)
    token = r.context["new_token"]
    assert token.startswith("gha_") and token.encode() in r.content
    assert team_for_api_token(token) == team
    # The list page afterwards shows only the prefix, never the token again.
    r = client.get(url)
    assert token.encode() not in r.content and row.prefix.encode() in r.content
    r = client.post(f"{url}{row.id}/revoke/")
    assert r.status_code == 302
    assert team_for_api_token(token) is None


def test_token_name_is_required_and_nothing_is_stored_without_it(client, users, team):
    _login(client, users, "owner")
    r = client.post(f"/teams/{team.slug}/api-tokens/", {"name": "  "})
    assert r.status_code == 400
    assert not ApiToken.objects.exists()


def test_member_may_not_see_create_or_revoke(client, users, team):
    # API tokens are admin business in the team permission matrix ("tokens.manage").
    row, _ = ApiToken.issue(team, "ci")
    _login(client, users, "member")
    url = f"/teams/{team.slug}/api-tokens/"
    assert client.get(url).status_code == 403
    assert client.post(url, {"name": "x"}).status_code == 403
    assert client.post(f"{url}{row.id}/revoke/").status_code == 403
    assert ApiToken.objects.count() == 1 and ApiToken.objects.get().revoked_at is None


def test_admin_role_may_manage_tokens(client, users, team):
    from greenops.teams.models import Membership

    Membership.objects.filter(team=team, user=users["member"]).update(role=Role.ADMIN)
    _login(client, users, "member")
    assert client.post(f"/teams/{team.slug}/api-tokens/", {"name": "x"}).status_code == 200


def test_outsider_gets_404_and_anonymous_is_sent_to_login(client, users, team, other_team):
    row, _ = ApiToken.issue(team, "ci")
    url = f"/teams/{team.slug}/api-tokens/"
    assert client.get(url).status_code == 302
    _login(client, users, "outsider")
    assert client.get(url).status_code == 404
    assert client.post(url, {"name": "x"}).status_code == 404
    assert client.post(f"{url}{row.id}/revoke/").status_code == 404
    # A token of another team cannot be revoked through one's own team either.
    other = ApiToken.issue(other_team, "theirs")[0]
    _login(client, users, "owner")
    assert client.post(f"{url}{other.id}/revoke/").status_code == 404
    assert ApiToken.objects.get(id=other.id).revoked_at is None
