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
from django.urls import reverse
from django.utils import timezone

from greenops.site import site_url as default_site_url
from greenops.teams import audit
from greenops.teams.models import INVITATION_PREFIX, AuditEvent, Invitation, Membership, Role, Team
from greenops.tokens import hash_token, new_token

INVITATION_TTL = timedelta(days=settings.INVITATION_TTL_DAYS)


class InvitationError(ValueError):
    """Why a link did not work: unknown, expired, already used, revoked, or someone else's."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class InvitationMailError(RuntimeError):
    """The invitation email could not be sent; no invitation was kept."""


CONSOLE_BACKEND = "django.core.mail.backends.console.EmailBackend"


def mail_goes_nowhere() -> bool:
    """The console backend only prints: the inviter must pass the link on themselves."""
    return settings.EMAIL_BACKEND == CONSOLE_BACKEND


def invite(team: Team, actor, email: str, role: str, *, site_url: str | None = None,
           now=None) -> tuple[Invitation, str]:
    """Create an invitation and email its link. Returns the row and the link.

    The row, the mail and the audit entry succeed or fail together: an invitation nobody was
    told about would sit in the pending list looking sent. Raises InvitationMailError when the
    mail server refuses or cannot be reached.
    """
    if role not in Role.values:
        raise ValueError(f"unknown role {role!r}")
    now = now or timezone.now()
    token = new_token(INVITATION_PREFIX)
    inviter = actor.get_username() if actor is not None else "GreenOps"
    with transaction.atomic():
        inv = Invitation.objects.create(team=team, email=email.strip().lower(), role=role,
                                        token_hash=hash_token(token), created_by=actor,
                                        expires_at=now + INVITATION_TTL)
        link = (site_url or default_site_url()) + reverse("invitation-accept", args=[token])
        audit.record(team, actor, AuditEvent.Action.MEMBER_INVITED, inv.email, role=role)
        try:
            send_mail(
                subject=f"{inviter} invited you to {team.name} on GreenOps",
                message=(f"{inviter} invited you to join the team {team.name} on GreenOps as "
                         f"{role}.\n\nOpen this link to accept (it works once, until "
                         f"{inv.expires_at:%Y-%m-%d %H:%M} UTC):\n{link}\n"),
                from_email=settings.DEFAULT_FROM_EMAIL,
                recipient_list=[inv.email],
            )
        except OSError as exc:  # smtplib.SMTPException, refused connections, TLS errors
            raise InvitationMailError(
                f"The invitation to {inv.email} could not be sent, so none was created: "
                f"{exc}. Check the EMAIL_* settings and try again.") from exc
    return inv, link


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
    from greenops.teams.permissions import rank

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
