"""Inviting people by email: an expiring, single-use link.

The token is 256 random bits; only its SHA-256 is stored, so the database alone cannot be used
to join a team. Accepting claims the invitation with one conditional update, so the same link
opened twice (or by two people) admits exactly one.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from greenops.queueing import publish_on_commit
from greenops.site import site_url as default_site_url
from greenops.teams import audit
from greenops.teams.models import INVITATION_PREFIX, AuditEvent, Invitation, Membership, Role, Team
from greenops.teams.permissions import rank
from greenops.tokens import hash_token, new_token

INVITATION_TTL = timedelta(days=settings.INVITATION_TTL_DAYS)


class InvitationError(ValueError):
    """Why a link did not work: unknown, expired, already used, revoked, or someone else's."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


CONSOLE_BACKEND = "django.core.mail.backends.console.EmailBackend"
MAX_MAIL_ATTEMPTS = 4  # the first send and three retries, 30 s, 60 s, 120 s apart


def mail_goes_nowhere() -> bool:
    """The console backend only prints: the inviter must pass the link on themselves."""
    return settings.EMAIL_BACKEND == CONSOLE_BACKEND


def _link(base_url: str, token: str) -> str:
    return base_url + reverse("invitation-accept", args=[token])


def invite(team: Team, actor, email: str, role: str, *, site_url: str | None = None,
           now=None) -> tuple[Invitation, str | None]:
    """Create an invitation; its mail is sent by a task once this transaction commits.

    Returns the row and, only when mail goes nowhere (console backend), the link for the
    inviter to pass on; otherwise None: the link exists only in the mail. A slow or dead mail
    server no longer holds the request: the members page shows the delivery state and a
    failure, with a resend.
    """
    if role not in Role.values:
        raise ValueError(f"unknown role {role!r}")
    now = now or timezone.now()
    base_url = site_url or default_site_url()
    nowhere = mail_goes_nowhere()
    with transaction.atomic():
        inv = Invitation.objects.create(
            team=team, email=email.strip().lower(), role=role, created_by=actor,
            expires_at=now + INVITATION_TTL,
            mail_status=Invitation.Mail.SHOWN if nowhere else Invitation.Mail.QUEUED)
        audit.record(team, actor, AuditEvent.Action.MEMBER_INVITED, inv.email, role=role)
        if nowhere:
            token = new_token(INVITATION_PREFIX)
            Invitation.objects.filter(id=inv.id).update(token_hash=hash_token(token))
            _send(inv, _link(base_url, token))  # prints to the server's console
            return inv, _link(base_url, token)
        _queue_mail(inv.id, base_url)
    return inv, None


def _send(inv: Invitation, link: str) -> None:
    inviter = inv.created_by.get_username() if inv.created_by else "GreenOps"
    send_mail(
        subject=f"{inviter} invited you to {inv.team.name} on GreenOps",
        message=(f"{inviter} invited you to join the team {inv.team.name} on GreenOps as "
                 f"{inv.role}.\n\nOpen this link to accept (it works once, until "
                 f"{inv.expires_at:%Y-%m-%d %H:%M} UTC):\n{link}\n"),
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=[inv.email],
    )


def resend(inv: Invitation, actor, *, site_url: str | None = None) -> bool:
    """Send a pending invitation's mail again, with a new link (the old one stops working)."""
    if mail_goes_nowhere():
        return False
    with transaction.atomic():
        done = Invitation.objects.pending().filter(id=inv.id).exclude(
            mail_status=Invitation.Mail.SENDING).update(
            mail_status=Invitation.Mail.QUEUED, mail_error="", mail_attempts=0)
        if done:
            audit.record(inv.team, actor, AuditEvent.Action.MEMBER_INVITED, inv.email,
                         role=inv.role, resent=True)
            _queue_mail(inv.id, site_url or default_site_url())
    return bool(done)


def _queue_mail(invitation_id: int, base_url: str) -> None:
    # tasks reads MAX_MAIL_ATTEMPTS from this module as it loads, so it cannot load first
    from greenops.teams.tasks import send_invitation

    publish_on_commit(send_invitation, invitation_id, base_url)  # broker down: the row waits


def deliver(invitation_id: int, base_url: str, now=None) -> str:
    """Send one invitation's mail: 'sent', 'failed' (worth a retry), or 'skipped' (already
    sent, being sent, used, withdrawn or expired). The row is claimed with one conditional
    update, so a redelivered message cannot mail twice. The token is made here and only its
    hash kept: the link exists in the mail alone."""
    now = now or timezone.now()
    claimed = Invitation.objects.pending(now).filter(
        id=invitation_id, mail_status__in=(Invitation.Mail.QUEUED, Invitation.Mail.FAILED),
    ).update(mail_status=Invitation.Mail.SENDING, mail_attempts=F("mail_attempts") + 1)
    if claimed != 1:
        return "skipped"
    inv = Invitation.objects.select_related("team", "created_by").get(id=invitation_id)
    token = new_token(INVITATION_PREFIX)
    Invitation.objects.filter(id=inv.id).update(token_hash=hash_token(token))
    try:
        _send(inv, _link(base_url, token))
    except OSError as exc:  # smtplib.SMTPException, refused connections, TLS errors
        Invitation.objects.filter(id=inv.id).update(
            mail_status=Invitation.Mail.FAILED, mail_error=f"{exc}"[:500] or type(exc).__name__)
        return "failed"
    Invitation.objects.filter(id=inv.id).update(
        mail_status=Invitation.Mail.SENT, mail_error="", mailed_at=timezone.now())
    return "sent"


def lookup(token: str) -> Invitation:
    """The invitation a link points to, or InvitationError saying why it cannot be used."""
    inv = Invitation.objects.select_related("team").filter(token_hash=hash_token(token)).first()
    if inv is None:
        raise InvitationError("unknown", "This invitation link is not valid.")
    if inv.accepted_at is not None:
        raise InvitationError("used", "This invitation has already been used.")
    if inv.revoked_at is not None:
        raise InvitationError("revoked", "This invitation was withdrawn.")
    if inv.expires_at <= timezone.now():
        raise InvitationError("expired", "This invitation has expired; ask for a new one.")
    return inv


def is_for(inv: Invitation, user) -> bool:
    """The link was sent to one address: only the account with that email may use it, so a
    forwarded or leaked link does not let someone else in."""
    email = (getattr(user, "email", "") or "").strip().lower()
    return bool(email) and email == inv.email


def wrong_user_message(inv: Invitation, user) -> str:
    email = (getattr(user, "email", "") or "").strip() or "no email address"
    return (f"This invitation is for {inv.email}, but you are logged in as "
            f"{user.get_username()} ({email}). Log in with the account for {inv.email}, or "
            f"ask a team owner to invite your own address.")


def accept(token: str, user) -> Membership:
    """Join the team. A user already in the team keeps the higher of the two roles."""
    inv = lookup(token)
    if not is_for(inv, user):
        raise InvitationError("wrong_user", wrong_user_message(inv, user))
    now = timezone.now()
    with transaction.atomic():
        claimed = Invitation.objects.pending(now).filter(id=inv.id).update(
            accepted_at=now, accepted_by=user)
        if claimed != 1:  # someone used it between lookup() and here
            raise InvitationError("used", "This invitation has already been used.")
        try:
            with transaction.atomic():
                membership = Membership.objects.create(team=inv.team, user=user, role=inv.role)
        except IntegrityError:
            membership = Membership.objects.get(team=inv.team, user=user)
            if rank(inv.role) > rank(membership.role):
                membership.role = inv.role
                membership.save(update_fields=["role"])
        audit.record(inv.team, user, AuditEvent.Action.MEMBER_JOINED, user.get_username(),
                     role=membership.role, invited_email=inv.email)
    return membership


def withdraw(inv: Invitation, actor) -> bool:
    """The link stops working. Claimed with one conditional update, so withdrawing twice (or
    after it was used) changes and records nothing; returns whether this call withdrew it."""
    done = Invitation.objects.filter(id=inv.id, accepted_at__isnull=True,
                                     revoked_at__isnull=True).update(revoked_at=timezone.now())
    if done:
        audit.record(inv.team, actor, AuditEvent.Action.INVITATION_WITHDRAWN, inv.email,
                     role=inv.role)
    return bool(done)
