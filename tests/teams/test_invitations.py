"""Creating teams, inviting by email (expiring, single use), roles and the audit log."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.test import TestCase
from django.utils import timezone

from greenops.teams import invitations, membership
from greenops.teams.models import AuditEvent, Invitation, Membership, Team


def _link_path(body: str) -> str:
    return re.search(r"https?://[^/\s]+(/invitations/\S+/)", body)[1]


def _invite(*args, **kwargs):
    """Invite and run the mail task as a commit would; returns the row and the mail's body,
    the one place the link exists."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        inv, _ = invitations.invite(*args, **kwargs)
    return inv, mail.outbox[-1].body


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


def test_invitation_email_link_joins_once(client, team, users, settings,
                                         django_capture_on_commit_callbacks):
    settings.SITE_URL = "https://greenops.example"
    client.force_login(users["owner"])
    with django_capture_on_commit_callbacks(execute=True):
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
    inv, link = _invite(team, users["owner"], "late@example.com", "member")
    Invitation.objects.filter(id=inv.id).update(expires_at=timezone.now() - timedelta(days=1))
    client.force_login(users["outsider"])
    resp = client.post(_link_path(link))
    assert resp.status_code == 410 and b"expired" in resp.content
    assert team.role_of(users["outsider"]) is None
    with pytest.raises(invitations.InvitationError) as exc:
        invitations.accept(_link_path(link).split("/")[2], users["outsider"])
    assert exc.value.code == "expired"


def test_unknown_link_is_404_and_anonymous_must_log_in(client, team, users):
    assert client.get("/invitations/ginv_nope/").status_code == 404
    _inv, link = _invite(team, users["owner"], "x@example.com", "member")
    html = client.get(_link_path(link)).content.decode()
    assert "Log in</a> to accept" in html
    assert client.post(_link_path(link)).status_code == 200  # anonymous POST joins nobody
    assert Invitation.objects.get().accepted_at is None


def test_accepting_keeps_the_higher_role(team, users):
    _inv, link = _invite(team, users["owner"], "Owner@Example.com", "viewer")
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


REFUSING = "tests.teams.test_invitations.RefusingMailBackend"
CONSOLE = "django.core.mail.backends.console.EmailBackend"


def test_the_mail_is_sent_by_a_task_after_the_request(client, team, users,
                                                     django_capture_on_commit_callbacks):
    client.force_login(users["owner"])
    with django_capture_on_commit_callbacks(execute=False) as hooks:
        resp = client.post(f"/teams/{team.slug}/members/",
                           {"email": "dana@example.com", "role": "viewer"})
    assert resp.status_code == 302
    assert len(mail.outbox) == 0  # the request only queued it
    inv = Invitation.objects.get()
    assert inv.mail_status == "queued" and inv.token_hash is None  # no link exists yet
    assert len(hooks) == 1
    hooks[0]()  # the task, once the request's transaction committed
    inv.refresh_from_db()
    assert len(mail.outbox) == 1 and inv.mail_status == "sent" and inv.mail_attempts == 1
    assert inv.token_hash and inv.mailed_at is not None
    # A redelivered message (acks_late after a worker crash) mails nobody twice.
    assert invitations.deliver(inv.id, "https://x") == "skipped"
    assert len(mail.outbox) == 1


def test_failing_mail_keeps_the_invitation_says_why_and_can_be_resent(
        client, team, users, settings, django_capture_on_commit_callbacks):
    settings.EMAIL_BACKEND = REFUSING
    client.force_login(users["owner"])
    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post(f"/teams/{team.slug}/members/", {"email": "dana@example.com",
                                                            "role": "viewer"}, follow=True)
    assert resp.status_code == 200
    inv = Invitation.objects.get()
    assert (inv.mail_status, inv.mail_attempts) == ("failed", 1)
    assert "Connection refused" in inv.mail_error
    html = client.get(f"/teams/{team.slug}/members/").content.decode()
    assert "mail failed after 1 attempt" in html and "Connection refused" in html
    assert "Resend" in html

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"  # fixed
    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post(f"/teams/{team.slug}/members/invitations/{inv.id}/resend")
    assert resp.status_code == 302
    inv.refresh_from_db()
    assert (inv.mail_status, inv.mail_attempts, inv.mail_error) == ("sent", 1, "")
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["dana@example.com"]
    assert AuditEvent.objects.filter(action="member.invited").count() == 2  # invited, resent


def test_resend_gives_a_new_link_and_the_old_one_stops_working(
        client, team, users, django_capture_on_commit_callbacks):
    client.force_login(users["owner"])
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/teams/{team.slug}/members/", {"email": "dana@example.com",
                                                     "role": "viewer"})
    inv = Invitation.objects.get()
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/teams/{team.slug}/members/invitations/{inv.id}/resend")
    first, second = (_link_path(m.body) for m in mail.outbox)
    assert first != second
    dana = User.objects.create_user("dana", "dana@example.com", "pw")
    client.force_login(dana)
    assert client.post(first).status_code == 404
    assert client.post(second).status_code == 302 and team.role_of(dana) == "viewer"


def test_failing_mail_through_the_api_is_reported_not_a_5xx(client, team, users, settings,
                                                            django_capture_on_commit_callbacks):
    settings.EMAIL_BACKEND = REFUSING
    client.force_login(users["owner"])
    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post(f"/api/v1/teams/{team.slug}/invitations",
                           '{"email": "dana@example.com", "role": "viewer"}',
                           content_type="application/json")
    assert resp.status_code == 201
    inv = Invitation.objects.get()
    # The answer was made before the task ran (after commit): it says "queued"; the row says
    # what happened.
    assert resp.json()["mail"] == "queued"
    assert inv.mail_status == "failed" and "Connection refused" in inv.mail_error


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


def test_a_real_mail_backend_never_shows_the_link(client, team, users,
                                                 django_capture_on_commit_callbacks):
    client.force_login(users["owner"])  # pytest-django's locmem backend: mail is "sent"
    with django_capture_on_commit_callbacks(execute=True):
        html = client.post(f"/teams/{team.slug}/members/",
                           {"email": "dana@example.com", "role": "viewer"},
                           follow=True).content.decode()
    assert "invite-link" not in html and "ginv_" not in html
    assert "Invitation to dana@example.com created" in html
    assert "mail sent" in client.get(f"/teams/{team.slug}/members/").content.decode()


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
    _inv, link = _invite(team, users["owner"], "Dana@Example.com", "admin")
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
