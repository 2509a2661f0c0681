"""Creating teams, inviting by email (expiring, single use), roles and the audit log."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.utils import timezone

from greenops.teams import invitations, membership
from greenops.teams.models import AuditEvent, Invitation, Membership, Team


def _link_path(body: str) -> str:
    return re.search(r"https?://[^/\s]+(/invitations/\S+/)", body)[1]


def test_create_team_makes_the_creator_owner(client, users):
    client.force_login(users["member"])
    resp = client.post("/new-team/", {"name": "Vision"})
    team = Team.objects.get(name="Vision")
    assert resp.status_code == 302 and resp["Location"] == f"/teams/{team.slug}/"
    assert team.role_of(users["member"]) == "owner"
    # A second team of the same name gets its own slug instead of an error.
    client.post("/new-team/", {"name": "Vision"})
    assert sorted(Team.objects.values_list("slug", flat=True)) == ["vision", "vision-2"]
    assert AuditEvent.objects.filter(action="team.created").count() == 2


def test_invitation_email_link_joins_once(client, team, users, settings):
    settings.SITE_URL = "https://greenops.example"
    client.force_login(users["owner"])
    resp = client.post(f"/teams/{team.slug}/members/",
                       {"email": "Dana@Example.com", "role": "viewer"})
    assert resp.status_code == 302
    assert len(mail.outbox) == 1
    msg = mail.outbox[0]
    assert msg.to == ["dana@example.com"] and "Vision" in msg.subject
    assert "https://greenops.example/invitations/ginv_" in msg.body
    inv = Invitation.objects.get()
    path = _link_path(msg.body)
    assert path.split("/")[2] not in inv.token_hash  # only the hash is stored

    dana = User.objects.create_user("dana", "dana@example.com", "pw")
    client.force_login(dana)
    assert b"Join Vision" in client.get(path).content
    resp = client.post(path)
    assert resp.status_code == 302 and resp["Location"] == f"/teams/{team.slug}/"
    assert team.role_of(dana) == "viewer"
    # Used: the same link never works again, for anyone.
    client.force_login(users["outsider"])
    resp = client.post(path)
    assert resp.status_code == 410 and b"already been used" in resp.content
    assert team.role_of(users["outsider"]) is None
    assert list(AuditEvent.objects.filter(team=team).values_list("action", flat=True)) == [
        "member.joined", "member.invited"]


def test_expired_invitation_is_refused(client, team, users):
    inv, link = invitations.invite(team, users["owner"], "late@example.com", "member",
                                   now=timezone.now() - timedelta(days=8))
    client.force_login(users["outsider"])
    resp = client.post(_link_path(link))
    assert resp.status_code == 410 and b"expired" in resp.content
    assert team.role_of(users["outsider"]) is None
    with pytest.raises(invitations.InvitationError) as exc:
        invitations.accept(_link_path(link).split("/")[2], users["outsider"])
    assert exc.value.code == "expired"


def test_unknown_link_is_404_and_anonymous_must_log_in(client, team, users):
    assert client.get("/invitations/ginv_nope/").status_code == 404
    _inv, link = invitations.invite(team, users["owner"], "x@example.com", "member")
    html = client.get(_link_path(link)).content.decode()
    assert "Log in</a> to accept" in html
    assert client.post(_link_path(link)).status_code == 200  # anonymous POST joins nobody
    assert Invitation.objects.get().accepted_at is None


def test_accepting_keeps_the_higher_role(team, users):
    _inv, link = invitations.invite(team, users["owner"], "Owner@Example.com", "viewer")
    m = invitations.accept(_link_path(link).split("/")[2], users["owner"])
    assert m.role == "owner"


def test_role_change_and_last_owner_protection(client, team, users):
    client.force_login(users["owner"])
    owner_m = Membership.objects.get(team=team, user=users["owner"])
    member_m = Membership.objects.get(team=team, user=users["member"])
    client.post(f"/teams/{team.slug}/members/{member_m.id}/role", {"role": "admin"})
    member_m.refresh_from_db()
    assert member_m.role == "admin"
    with pytest.raises(membership.MembershipError):
        membership.change_role(team, users["owner"], owner_m, "viewer")
    with pytest.raises(membership.MembershipError):
        membership.remove_member(team, users["owner"], owner_m)
    resp = client.post(f"/teams/{team.slug}/members/{owner_m.id}/role", {"role": "viewer"},
                       follow=True)
    assert b"at least one owner" in resp.content
    owner_m.refresh_from_db()
    assert owner_m.role == "owner"
    event = AuditEvent.objects.get(action="member.role_changed")
    assert (event.actor_label, event.target, event.detail) == (
        "owner", "member", {"old": "member", "new": "admin"})


def test_invite_api_validates_fields(client, team, users):
    client.force_login(users["owner"])
    resp = client.post(f"/api/v1/teams/{team.slug}/invitations",
                       '{"email": "x@example.com", "role": "god"}',
                       content_type="application/json")
    assert resp.status_code == 422 and resp.json()["field"] == "role"
    resp = client.post(f"/api/v1/teams/{team.slug}/invitations", '{"email": "nope"}',
                       content_type="application/json")
    assert resp.status_code == 422 and resp.json()["field"] == "email"
    assert Invitation.objects.count() == 0 and len(mail.outbox) == 0


def test_team_switcher_lists_teams_with_roles(client, team, other_team, users):
    Membership.objects.create(team=other_team, user=users["member"], role="viewer")
    client.force_login(users["member"])
    html = client.get(f"/teams/{team.slug}/hosts/").content.decode()
    nav = html.split("<nav>")[1].split("</nav>")[0]
    assert 'title="your role: member">Vision</a>' in nav
    assert 'title="your role: viewer">Speech</a>' in nav
    assert 'class="current" aria-current="page"' in nav.split("Speech")[0]
    assert "+ New team" in nav


# --- audit of issue 4: mail failures, the console backend, who may accept -------------------

class RefusingMailBackend:
    """A mail server that is down: what Django's SMTP backend raises then."""

    def __init__(self, *args, **kwargs):
        pass

    def send_messages(self, messages):
        raise ConnectionRefusedError(111, "Connection refused")


REFUSING = "tests.test_teams_invitations.RefusingMailBackend"
CONSOLE = "django.core.mail.backends.console.EmailBackend"


def test_failing_mail_leaves_no_invitation_and_says_so(client, team, users, settings):
    settings.EMAIL_BACKEND = REFUSING
    client.force_login(users["owner"])
    resp = client.post(f"/teams/{team.slug}/members/", {"email": "dana@example.com",
                                                        "role": "viewer"})
    assert resp.status_code == 502
    html = resp.content.decode()
    assert 'id="invite-error"' in html and "could not be sent" in html
    assert "Connection refused" in html and "dana@example.com" in html
    assert Invitation.objects.count() == 0
    assert not AuditEvent.objects.filter(action="member.invited").exists()
    with pytest.raises(invitations.InvitationMailError):
        invitations.invite(team, users["owner"], "dana@example.com", "viewer")
    assert Invitation.objects.count() == 0


def test_failing_mail_through_the_api_is_a_json_error(client, team, users, settings):
    settings.EMAIL_BACKEND = REFUSING
    client.force_login(users["owner"])
    resp = client.post(f"/api/v1/teams/{team.slug}/invitations",
                       '{"email": "dana@example.com", "role": "viewer"}',
                       content_type="application/json")
    assert resp.status_code == 502
    assert resp.json()["error"] == "mail_failed" and resp.json()["field"] == "email"
    assert Invitation.objects.count() == 0


def test_console_backend_shows_the_link_once_to_the_inviter(client, team, users, settings,
                                                            capsys):
    settings.EMAIL_BACKEND = CONSOLE
    settings.SITE_URL = "https://greenops.example"
    client.force_login(users["owner"])
    resp = client.post(f"/teams/{team.slug}/members/",
                       {"email": "dana@example.com", "role": "viewer"}, follow=True)
    printed = capsys.readouterr().out
    link = re.search(r"https://greenops\.example/invitations/ginv_\S+/", printed)[0]
    html = resp.content.decode()
    assert f'<code id="invite-link">{link}</code>' in html
    assert "no email was sent" in html
    again = client.get(f"/teams/{team.slug}/members/").content.decode()
    assert "invite-link" not in again and link not in again  # once


def test_a_real_mail_backend_never_shows_the_link(client, team, users):
    client.force_login(users["owner"])  # pytest-django's locmem backend: mail is "sent"
    html = client.post(f"/teams/{team.slug}/members/",
                       {"email": "dana@example.com", "role": "viewer"},
                       follow=True).content.decode()
    assert "invite-link" not in html and "ginv_" not in html
    assert "Invitation sent to dana@example.com" in html


def test_smtp_settings_come_from_the_environment():
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "greenops.settings",
           "EMAIL_HOST": "smtp.example.com", "EMAIL_PORT": "2525", "EMAIL_HOST_USER": "greenops",
           "EMAIL_HOST_PASSWORD": "s3cret", "EMAIL_USE_TLS": "true"}
    code = ("from django.conf import settings as s; print(s.EMAIL_HOST, s.EMAIL_PORT, "
            "s.EMAIL_HOST_USER, s.EMAIL_HOST_PASSWORD, s.EMAIL_USE_TLS)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["smtp.example.com", "2525", "greenops", "s3cret", "True"]


def test_only_the_invited_address_can_accept(client, team, users):
    _inv, link = invitations.invite(team, users["owner"], "Dana@Example.com", "admin")
    path = _link_path(link)
    client.force_login(users["outsider"])  # outsider@example.com, holding Dana's link
    page = client.get(path)
    assert page.status_code == 403
    html = page.content.decode()
    assert 'id="invitation-wrong-user"' in html and "dana@example.com" in html
    assert "outsider@example.com" in html and "Join as" not in html
    resp = client.post(path)
    assert resp.status_code == 403 and b"dana@example.com" in resp.content
    assert team.role_of(users["outsider"]) is None
    with pytest.raises(invitations.InvitationError) as exc:
        invitations.accept(path.split("/")[2], users["outsider"])
    assert exc.value.code == "wrong_user"
    assert Invitation.objects.get().accepted_at is None  # still there for Dana

    # An account without an email cannot take it either; Dana's (any case) can.
    nomail = User.objects.create_user("nomail", "", "pw")
    with pytest.raises(invitations.InvitationError):
        invitations.accept(path.split("/")[2], nomail)
    dana = User.objects.create_user("dana", "DANA@example.COM", "pw")
    client.force_login(dana)
    assert client.post(path).status_code == 302
    assert team.role_of(dana) == "admin"
