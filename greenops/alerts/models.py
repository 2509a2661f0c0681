"""Alert rules, their state and history, notification channels and every notification attempt.

A rule is evaluated by greenops.alerts.evaluate (pure state machine + one KPI lookup through
greenops.alerts.kpi_values); channels deliver through one class per kind (greenops.alerts.channels).
A Notification row is written before each send, so a crash between "decided to notify" and
"sent" leaves a row that says so, and a replayed task finds the row instead of sending twice.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import models
from django.utils import timezone

from greenops.alerts import crypto
from greenops.alerts.rule_kpis import KPIS
from greenops.teams.models import Team
from greenops.telemetry.models import Gpu, Host
from greenops.workloads.models import Workload


class ChannelKind(models.TextChoices):
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "Webhook (signed JSON)"
    APPRISE = "apprise", "Apprise URL (Slack, Teams, PagerDuty, ntfy, …)"


class Digest(models.TextChoices):
    NONE = "", "Send each alert as it happens"
    DAILY = "daily", "Daily digest"
    WEEKLY = "weekly", "Weekly digest (Mondays)"


class Channel(models.Model):
    team = models.ForeignKey(Team, models.CASCADE, related_name="alert_channels")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=10, choices=ChannelKind.choices)
    # Address, webhook URL or apprise URL, encrypted (crypto.encrypt); shown only masked.
    target_enc = models.TextField()
    target_masked = models.CharField(max_length=200)
    # Webhook HMAC secret, encrypted; shown once, when the channel is created.
    secret_enc = models.TextField(blank=True)
    send_resolved = models.BooleanField(default=True)
    # A digest channel collects its notifications and sends them in one message at
    # digest_hour in the team's time zone, daily or on Mondays.
    digest = models.CharField(max_length=6, choices=Digest.choices, blank=True, default="")
    digest_hour = models.PositiveSmallIntegerField(default=8)
    last_digest_at = models.DateTimeField(null=True, blank=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=500, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    last_delivery_at = models.DateTimeField(null=True, blank=True)
    # The address the admin used when saving the channel ("https://greenops.example.com"):
    # links in its messages are absolute with it when SITE_URL is unset.
    site_url = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["team", "name"],
                                               name="alert_channel_name")]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    @property
    def target(self) -> str:
        return crypto.decrypt(self.target_enc)

    def set_target(self, target: str) -> None:
        self.target_enc = crypto.encrypt(target)
        self.target_masked = crypto.mask(target)[:200]

    @property
    def secret(self) -> str:
        return crypto.decrypt(self.secret_enc)

    def set_secret(self, secret: str) -> None:
        self.secret_enc = crypto.encrypt(secret)

    @property
    def enabled(self) -> bool:
        return self.disabled_at is None

    def disable(self, reason: str) -> None:
        """A permanent failure (404/410, an invalid address): sending again would only fail
        again, so stop until someone fixes the channel and enables it."""
        now = timezone.now()
        Channel.objects.filter(id=self.id).update(
            disabled_at=now, disabled_reason=reason[:500], last_error=reason[:500],
            last_error_at=now)
        self.disabled_at, self.disabled_reason = now, reason[:500]

    def digest_slot(self, now: dt.datetime) -> dt.datetime | None:
        """The latest scheduled digest time at or before `now` (None: not a digest channel)."""
        if not self.digest:
            return None
        local = now.astimezone(self.team.tz)
        day = local.date()
        if local.hour < self.digest_hour:
            day -= dt.timedelta(days=1)
        if self.digest == Digest.WEEKLY:
            day -= dt.timedelta(days=day.weekday())  # back to Monday
        # One slot per local date: built from the date, the hour and fold=0, so the hour a
        # clock change repeats (02:00 twice in autumn) gives one slot, not two, and the hour
        # it skips (02:00 in spring) gives one too (at 03:00 summer time).
        slot = dt.datetime(day.year, day.month, day.day, self.digest_hour, tzinfo=self.team.tz)
        return slot.astimezone(dt.UTC)

    def digest_due(self, now: dt.datetime) -> bool:
        """Immediate channels always; digest channels once per slot since the last digest
        (or since the channel was made: its first digest is the next slot, not now)."""
        slot = self.digest_slot(now)
        return slot is None or slot > (self.last_digest_at or self.created_at)

    def enable(self) -> None:
        Channel.objects.filter(id=self.id).update(disabled_at=None, disabled_reason="")
        self.disabled_at, self.disabled_reason = None, ""


class RuleKind(models.TextChoices):
    THRESHOLD = "threshold", "Threshold (above or below a level)"
    CHANGE = "change", "Change against a baseline window"
    BUDGET = "budget", "Monthly budget (actual and forecast)"
    STOPPED = "stopped", "Host stopped reporting"


class Direction(models.TextChoices):
    ABOVE = "above", "above"
    BELOW = "below", "below"


class State(models.TextChoices):
    OK = "ok", "OK"
    PENDING = "pending", "Pending"
    FIRING = "firing", "Firing"
    RECOVERING = "recovering", "Recovering"
    NODATA = "nodata", "No data"
    ERROR = "error", "Error"


class NoDataPolicy(models.TextChoices):
    NODATA = "nodata", "Go to No data and notify"
    OK = "ok", "Treat as OK"
    KEEP = "keep", "Keep the last state"


# What "firing" means (RuleQuerySet.firing; counted on the team home): Firing, or Recovering --
# still firing until the clear level holds for its for-minutes -- and enabled.
FIRING_STATES = (State.FIRING, State.RECOVERING)
FIRING_NOW = models.Q(enabled=True, state__in=FIRING_STATES)


class RuleQuerySet(models.QuerySet):
    def for_page(self) -> RuleQuerySet:
        return self.select_related("host", "gpu__host", "workload").prefetch_related("channels")

    def firing(self) -> RuleQuerySet:
        """Enabled rules whose condition holds now: Firing, or Recovering (still firing until
        the clear level holds for its for-minutes), longest-firing first."""
        return self.filter(FIRING_NOW).order_by("state_since", "id")


class Rule(models.Model):
    team = models.ForeignKey(Team, models.CASCADE, related_name="alert_rules")
    name = models.CharField(max_length=120)
    enabled = models.BooleanField(default=True)
    kind = models.CharField(max_length=10, choices=RuleKind.choices)
    kpi = models.CharField(max_length=40, blank=True)  # a key of kpi_values.KPIS; blank: stopped
    window = models.CharField(max_length=8, default="1h")  # a key of kpi_values.WINDOWS
    # Scope: at most one of these; none means the whole team.
    host = models.ForeignKey(Host, models.CASCADE, null=True, blank=True, related_name="+")
    gpu = models.ForeignKey(Gpu, models.CASCADE, null=True, blank=True, related_name="+")
    workload = models.ForeignKey(Workload, models.CASCADE, null=True, blank=True,
                                 related_name="+")
    direction = models.CharField(max_length=5, choices=Direction.choices,
                                 default=Direction.ABOVE)
    # threshold: KPI units; change: percent; budget: USD or kg CO2e for the month.
    fire_level = models.FloatField(null=True, blank=True)
    # Where a firing rule clears (hysteresis); null: the fire level itself.
    clear_level = models.FloatField(null=True, blank=True)
    baseline_days = models.PositiveIntegerField(default=7)
    min_requests = models.PositiveIntegerField(default=0)
    budget_forecast = models.BooleanField(default=True)
    forecast_min_days = models.PositiveIntegerField(default=7)
    stopped_minutes = models.PositiveIntegerField(default=10)
    # No data means the source stopped: no samples from the rule's hosts for this long. An
    # empty window while they report (a day that just began) holds the state instead.
    nodata_grace_minutes = models.PositiveIntegerField(default=60)
    for_minutes = models.PositiveIntegerField(default=5)
    keep_firing_minutes = models.PositiveIntegerField(default=0)
    no_data = models.CharField(max_length=6, choices=NoDataPolicy.choices,
                               default=NoDataPolicy.NODATA)
    include_simulated = models.BooleanField(default=False)
    channels = models.ManyToManyField(Channel, blank=True, related_name="rules")
    repeat_minutes = models.PositiveIntegerField(default=240)  # 0: never repeat
    silenced_until = models.DateTimeField(null=True, blank=True)
    # Recurring mute window in the team's time zone: these weekdays (0 = Monday) all day, and
    # every day from mute_start_hour to mute_end_hour (wrapping past midnight).
    mute_weekdays = models.CharField(max_length=20, blank=True)
    mute_start_hour = models.PositiveSmallIntegerField(null=True, blank=True)
    mute_end_hour = models.PositiveSmallIntegerField(null=True, blank=True)
    # State, written only by evaluate.run().
    state = models.CharField(max_length=10, choices=State.choices, default=State.OK)
    state_since = models.DateTimeField(default=timezone.now)
    last_value = models.FloatField(null=True, blank=True)
    last_detail = models.TextField(blank=True)
    last_evaluated_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_notified_at = models.DateTimeField(null=True, blank=True)
    # Whether this firing episode has been notified: a rule that fired and cleared while
    # silenced sends no "resolved" for a "firing" nobody received.
    episode_notified = models.BooleanField(default=False)
    # The evaluation minute last claimed: `filter(last_tick__lt=tick).update(...) == 1` lets
    # exactly one of two workers (or a replayed message) evaluate a minute.
    last_tick = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True,
                                   blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    objects = RuleQuerySet.as_manager()

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name

    @property
    def scope_label(self) -> str:
        if self.gpu_id:
            return f"GPU {self.gpu.index} of {self.gpu.host.name}"
        if self.host_id:
            return f"host {self.host.name}"
        if self.workload_id:
            return f"workload {self.workload.name}"
        return f"team {self.team.name}"

    @property
    def unit(self) -> str:
        """The unit of the value the rule compares (what its chart and messages show)."""
        if self.kind == RuleKind.STOPPED:
            return "hosts"
        if self.kind == RuleKind.CHANGE:
            return "%"
        return KPIS[self.kpi].unit if self.kpi in KPIS else ""

    def effective_clear_level(self) -> float | None:
        return self.fire_level if self.clear_level is None else self.clear_level

    def muted_reason(self, now: dt.datetime, tz: dt.tzinfo) -> str:
        """Why notifications are held back right now ('' when they are not)."""
        if self.silenced_until and now < self.silenced_until:
            return f"silenced until {self.silenced_until.astimezone(tz):%Y-%m-%d %H:%M %Z}"
        local = now.astimezone(tz)
        days = {int(d) for d in self.mute_weekdays.split(",") if d.strip().isdigit()}
        if local.weekday() in days:
            return f"muted on {local:%A}s"
        lo, hi = self.mute_start_hour, self.mute_end_hour
        if lo is not None and hi is not None and lo != hi:
            inside = lo <= local.hour < hi if lo < hi else (local.hour >= lo or local.hour < hi)
            if inside:
                return f"muted daily {lo:02d}:00-{hi:02d}:00"
        return ""


class RuleEvent(models.Model):
    """One row per state change, and per evaluation that changed something (an error, a
    corrected figure): the rule page's history."""

    rule = models.ForeignKey(Rule, models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now)
    from_state = models.CharField(max_length=10, choices=State.choices)
    to_state = models.CharField(max_length=10, choices=State.choices)
    value = models.FloatField(null=True, blank=True)
    detail = models.TextField(blank=True)
    figure = models.JSONField(default=dict)  # window, sources, measured/estimated
    muted = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-at", "-id"]


class RuleValue(models.Model):
    """The value seen at each evaluation, for the rule page's chart (kept 14 days)."""

    rule = models.ForeignKey(Rule, models.CASCADE, related_name="values")
    at = models.DateTimeField()
    value = models.FloatField(null=True)

    class Meta:
        ordering = ["at"]
        indexes = [models.Index(fields=["rule", "at"], name="alert_value_rule_at")]


class NotificationKind(models.TextChoices):
    FIRING = "firing", "Firing"
    RESOLVED = "resolved", "Resolved"
    REPEAT = "repeat", "Still firing"
    NODATA = "nodata", "No data"
    ERROR = "error", "Evaluation error"
    TEST = "test", "Test"


class NotificationStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SENDING = "sending", "Sending"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"


class Notification(models.Model):
    channel = models.ForeignKey(Channel, models.CASCADE, related_name="notifications")
    # SET_NULL: the "resolved" sent when a firing rule is deleted outlives the rule.
    rule = models.ForeignKey(Rule, models.SET_NULL, null=True, blank=True,
                             related_name="notifications")
    event = models.ForeignKey(RuleEvent, models.SET_NULL, null=True, blank=True,
                              related_name="notifications")
    kind = models.CharField(max_length=10, choices=NotificationKind.choices)
    # One notification per (event or repeat tick, channel): a replayed evaluation finds it.
    dedupe_key = models.CharField(max_length=120, unique=True)
    payload = models.JSONField(default=dict)  # the message's figures, as rendered
    status = models.CharField(max_length=8, choices=NotificationStatus.choices,
                              default=NotificationStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)  # retries back off
    error = models.CharField(max_length=500, blank=True)  # secrets redacted
    error_class = models.CharField(max_length=80, blank=True)  # e.g. TransportError
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["channel", "status"], name="alert_notif_chan_status")]


class EmailAddress(models.Model):
    """An address outside the team that may receive its alert e-mail once someone clicked the
    link sent to it (team members' own addresses need no confirmation)."""

    team = models.ForeignKey(Team, models.CASCADE, related_name="alert_addresses")
    address = models.EmailField()
    token = models.CharField(max_length=64, unique=True)
    confirmed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "address"],
                                               name="alert_email_address")]
