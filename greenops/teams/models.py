"""Teams and who belongs to them. Every page and API call is scoped through these."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django.utils.text import slugify

from greenops import windows
from greenops.errors import FieldError
from greenops.tokens import hash_token, new_token


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


class TeamQuerySet(models.QuerySet):
    def for_user(self, user) -> TeamQuerySet:
        if not user.is_authenticated:
            return self.none()
        return self.filter(memberships__user=user)


def validate_time_zone(name: str) -> None:
    """Model-level check (admin, full_clean) with the same rule as the API's FieldError."""
    try:
        windows.time_zone(name)
    except FieldError as exc:
        raise ValidationError(exc.message) from None


class Team(models.Model):
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=100, unique=True)
    # IANA name; a report month is a calendar month here (greenops.windows.calendar_month).
    time_zone = models.CharField(max_length=64, default="UTC", validators=[validate_time_zone])
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs) -> None:
        if not self.slug:
            self.slug = slugify(self.name)[:100] or "team"
        super().save(*args, **kwargs)

    @property
    def tz(self) -> ZoneInfo:
        return windows.time_zone(self.time_zone)

    def role_of(self, user) -> str | None:
        if not user.is_authenticated:
            return None
        m = self.memberships.filter(user=user).only("role").first()
        return m.role if m else None


class Membership(models.Model):
    team = models.ForeignKey(Team, models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="one_membership")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} as {self.role}"


API_TOKEN_PREFIX = "gha_"


# scope -> the kinds of work it allows. Read and ingest are apart on purpose: a dashboard's
# token cannot write measurements, and an inference server's token cannot read the costs.
SCOPE_ALLOWS: dict[str, frozenset[str]] = {
    "read": frozenset({"read"}),
    "ingest": frozenset({"ingest"}),
    "admin": frozenset({"read", "ingest", "admin"}),
}


class ApiTokenQuerySet(models.QuerySet):
    def active(self, now=None) -> ApiTokenQuerySet:
        """Neither revoked nor past its expiry (checked on every request, so both take effect
        on the next one)."""
        return self.filter(revoked_at__isnull=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now or timezone.now()))


class ApiToken(models.Model):
    """A team's API token for applications and tools: a scope says what it may do (read the
    team's figures, send measurements, or both plus team setup), an optional expiry ends it.

    Only the hash is stored; the token itself is shown once, when it is created.
    """

    class Scope(models.TextChoices):
        # What each scope allows is written once, in greenops.teams.api_tokens.SCOPE_ALLOWS.
        READ = "read", "read: the team's figures (KPIs, usage, costs, hosts, /metrics)"
        INGEST = "ingest", "ingest: send inference counts, training jobs, codecarbon runs"
        ADMIN = "admin", "admin: read, ingest and team setup (workloads)"

    team = models.ForeignKey(Team, models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    # Tokens made before scopes existed could only send measurements: they stay "ingest".
    scope = models.CharField(max_length=10, choices=Scope.choices, default=Scope.INGEST)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, team: Team, name: str, created_by=None, *, scope: str = Scope.INGEST,
              expires_at=None) -> tuple[ApiToken, str]:
        """Create a token; returns the row and the plaintext, which is never retrievable again."""
        token = new_token(API_TOKEN_PREFIX)
        row = cls.objects.create(team=team, name=name, token_hash=hash_token(token),
                                 prefix=token[:10], created_by=created_by, scope=scope,
                                 expires_at=expires_at)
        return row, token

    def allows(self, kind: str) -> bool:
        """May this token do `kind` of work ("read", "ingest" or "admin")?"""
        return kind in SCOPE_ALLOWS[self.scope]

    def state(self, now=None) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= (now or timezone.now()):
            return "expired"
        return "active"

    def revoke(self) -> bool:
        """Revoke once; returns False if it was already revoked (so a double click is harmless)."""
        now = timezone.now()
        done = ApiToken.objects.filter(id=self.id, revoked_at__isnull=True).update(revoked_at=now)
        if done:
            self.revoked_at = now
        return bool(done)


# last_used_at is a hint for the token page, not an audit log: writing it on every request
# would turn each API call into a row update, so it is refreshed at most once a minute.
LAST_USED_RESOLUTION_S = 60


def api_token_row(token: str | None) -> ApiToken | None:
    """The token row for a plaintext token whatever its state (to say why it is refused)."""
    if not token or not token.startswith(API_TOKEN_PREFIX):
        return None
    return ApiToken.objects.filter(token_hash=hash_token(token)).select_related("team").first()


def api_token_for(token: str | None) -> ApiToken | None:
    """The active token row for a plaintext token, or None. Marks it used (coarsely)."""
    row = api_token_row(token)
    if row is None or row.state() != "active":
        return None
    now = timezone.now()
    idle_s = None if row.last_used_at is None else (now - row.last_used_at).total_seconds()
    if idle_s is None or idle_s > LAST_USED_RESOLUTION_S:
        ApiToken.objects.filter(id=row.id).update(last_used_at=now)
        row.last_used_at = now
    return row


def team_for_api_token(token: str | None, need: str = "ingest") -> Team | None:
    """The team an application's API token belongs to; None for unknown, revoked or expired
    tokens and for tokens whose scope does not allow `need`."""
    row = api_token_for(token)
    return row.team if row is not None and row.allows(need) else None


# --- Invitations and the audit log (issue 4) ----------------------------------------------

INVITATION_PREFIX = "ginv_"


class InvitationQuerySet(models.QuerySet):
    def pending(self, now=None) -> InvitationQuerySet:
        return self.filter(accepted_at__isnull=True, revoked_at__isnull=True,
                           expires_at__gt=now or timezone.now())


class Invitation(models.Model):
    """An expiring, single-use link that makes whoever opens it (logged in) a team member.

    Only the link token's hash is stored: the email is the one place the token exists. The
    token is made by the task that sends the mail (or, when mail goes nowhere, by the request
    that shows the link to the inviter), so it never travels through the broker.
    """

    class Mail(models.TextChoices):
        QUEUED = "queued", "queued"
        SENDING = "sending", "sending"
        SENT = "sent", "sent"
        FAILED = "failed", "failed"
        SHOWN = "shown", "link shown to the inviter (no mail server)"

    team = models.ForeignKey(Team, models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    token_hash = models.CharField(max_length=64, unique=True, null=True, blank=True)
    mail_status = models.CharField(max_length=10, choices=Mail.choices, default=Mail.QUEUED)
    mail_error = models.TextField(blank=True, default="")
    mail_attempts = models.PositiveIntegerField(default=0)
    mailed_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = InvitationQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.email} to {self.team} as {self.role}"


class AuditEvent(models.Model):
    """One admin action on a team: who did what to which object, and when. Never edited."""

    class Action(models.TextChoices):
        TEAM_CREATED = "team.created", "Team created"
        TEAM_RENAMED = "team.renamed", "Team renamed"
        TEAM_TIME_ZONE = "team.time_zone", "Team time zone changed"
        TEAM_DELETED = "team.deleted", "Team deleted"
        HOST_ENROLL_TOKEN = "host.enroll_token", "Enrollment token issued"
        HOST_ENROLLED = "host.enrolled", "Host enrolled"
        HOST_REVOKED = "host.revoked", "Host token revoked"
        HOST_ROTATED = "host.rotated", "Host token rotated"
        HOST_REMOVED = "host.removed", "Host removed"
        HOST_DELETED = "host.deleted", "Host and its history deleted"
        MEMBER_INVITED = "member.invited", "Member invited"
        INVITATION_WITHDRAWN = "member.invitation_withdrawn", "Invitation withdrawn"
        MEMBER_JOINED = "member.joined", "Member joined"
        MEMBER_ROLE_CHANGED = "member.role_changed", "Member role changed"
        MEMBER_REMOVED = "member.removed", "Member removed"
        TOKEN_CREATED = "token.created", "API token created"
        TOKEN_REVOKED = "token.revoked", "API token revoked"
        WORKLOAD_CREATED = "workload.created", "Workload registered"
        WORKLOAD_CHANGED = "workload.changed", "Workload changed"
        HOST_CHANGED = "host.changed", "Host changed"
        PRICE_OVERRIDE_SET = "price.override_set", "Price override set"
        PRICE_OVERRIDE_ENDED = "price.override_ended", "Price override ended"
        SITE_CREATED = "site.created", "Site created"
        SITE_CHANGED = "site.changed", "Site changed"

    # A team's log goes with the team; only the "team deleted" row outlives it, with no team
    # (its name and slug are in target and detail), so a deletion is never unrecorded.
    team = models.ForeignKey(Team, models.CASCADE, null=True, blank=True,
                             related_name="audit_events")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # Kept as text too: the log must still say who it was after the user is deleted, and some
    # actors are not users (a host enrolling with its token).
    actor_label = models.CharField(max_length=150)
    action = models.CharField(max_length=32, choices=Action.choices)
    target = models.CharField(max_length=255, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.actor_label} {self.action} {self.target}"
