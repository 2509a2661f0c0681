"""Messages and delivery: what a notification says, and sending a channel's pending ones.

Delivery is grouped per channel: every pending notification of a channel that is due goes out
in one message (Alertmanager's grouping), so five rules firing in the same minute send one
Slack message, not five. A row is claimed (pending -> sending) before the send; a replayed
delivery task finds nothing pending and sends nothing.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.core.mail import BadHeaderError
from django.db import transaction
from django.db.models import F, Q
from django.urls import reverse
from django.utils import timezone

from greenops.alerts import channels, crypto, kpi_values
from greenops.alerts.models import (
    Channel,
    ChannelKind,
    Notification,
    NotificationKind,
    NotificationStatus,
    Rule,
    RuleKind,
)
from greenops.units import amount

log = logging.getLogger(__name__)
TAGS = {NotificationKind.FIRING: "FIRING", NotificationKind.RESOLVED: "RESOLVED",
        NotificationKind.REPEAT: "STILL FIRING", NotificationKind.NODATA: "NO DATA",
        NotificationKind.ERROR: "ERROR", NotificationKind.TEST: "TEST"}


def absolute(path: str) -> str:
    return settings.SITE_URL.rstrip("/") + path if settings.SITE_URL else path


def with_links(p: dict, channel: Channel) -> dict:
    """A payload whose links are absolute: SITE_URL when set (applied when it was written),
    else the address the admin used when saving the channel. A receiver outside the site
    cannot follow "/teams/..."."""
    base = channel.site_url.rstrip("/")
    if not base:
        return p
    return {**p, **{k: base + p[k] for k in ("url", "explains")
                    if isinstance(p.get(k), str) and p[k].startswith("/")}}


def payload(rule: Rule, kind: str, value: float | None, detail: str, figure: dict,
            now: dt.datetime) -> dict:
    """Everything a message says, frozen when the notification is written."""
    kpi = kpi_values.KPIS.get(rule.kpi)
    if rule.kind == RuleKind.STOPPED:
        unit, label = "hosts", "Hosts not reporting"
    elif rule.kind == RuleKind.CHANGE:
        unit, label = "%", f"Change in {kpi.label.lower()}"
    else:
        unit, label = kpi.unit, kpi.label
    threshold = {"direction": rule.direction, "fire": rule.fire_level,
                 "clear": rule.effective_clear_level()}
    if rule.kind == RuleKind.STOPPED:
        threshold = {"direction": "above", "fire": 0, "minutes": rule.stopped_minutes}
    elif rule.kind == RuleKind.BUDGET:
        threshold = {"budget": rule.fire_level, "unit": kpi.unit,
                     "forecast": rule.budget_forecast}
    return {
        "kind": kind, "rule": rule.name, "rule_id": rule.id, "rule_kind": rule.kind,
        "team": rule.team.slug, "kpi": rule.kpi or "host_stopped", "kpi_label": label,
        "value": value, "unit": unit, "threshold": threshold, "scope": rule.scope_label,
        "window": {"start": figure.get("start"), "end": figure.get("end"),
                   "label": kpi_values.WINDOWS.get(rule.window, ("",))[0]
                   if rule.kind in (RuleKind.THRESHOLD, RuleKind.CHANGE) else
                   "calendar month" if rule.kind == RuleKind.BUDGET else
                   f"last {rule.stopped_minutes} min"},
        "measured": not figure.get("estimated"), "estimated": figure.get("estimated", []),
        "simulated": bool(figure.get("simulated")), "detail": detail,
        "forecast": figure.get("forecast"),
        "url": absolute(reverse("alert-rule", args=[rule.team.slug, rule.id])),
        "explains": absolute(reverse("carbon-methodology")),
        "at": now.isoformat(),
    }


def _line(p: dict) -> str:
    value = amount(p["value"], p["unit"])
    how = "measured" if p["measured"] else "estimated: " + "; ".join(p["estimated"])
    sim = " Includes SIMULATED data." if p.get("simulated") else ""
    return (f"[{TAGS.get(p['kind'], p['kind'])}] {p['rule']} ({p['scope']})\n"
            f"  {p['kpi_label']}: {value} — {p['detail']}\n"
            f"  Window: {p['window']['label']} {p['window']['start'] or ''} to "
            f"{p['window']['end'] or ''}\n"
            f"  Figures: {how}.{sim}\n  {p['url']}  (how figures are computed: "
            f"{p['explains']})")


def render(team_name: str, payloads: list[dict]) -> channels.Message:
    if len(payloads) == 1:
        p = payloads[0]
        title = f"[{TAGS.get(p['kind'], p['kind'])}] {p['rule']} · {team_name}"
    else:
        title = f"{len(payloads)} GreenOps alerts · {team_name}"
    text = "\n\n".join(_line(p) for p in payloads)
    doc = {"team": payloads[0]["team"], "alerts": payloads,
           "sent_at": timezone.now().isoformat()}
    return channels.Message(title, text, doc)


def backoff(attempts: int, rand: Callable[[], float] = random.random) -> dt.timedelta:
    """30 s, 1 min, 2 min, 4 min ... capped at an hour, each scaled by a random 50-100 %
    ("equal jitter"): a receiver that was down for everyone is not hit by every team's retry
    in the same second when it comes back."""
    full = min(30 * 2 ** max(attempts - 1, 0), 3600)
    return dt.timedelta(seconds=full * (0.5 + rand() / 2))


URL = re.compile(r"[a-z][a-z0-9+.-]*://[^\s'\"<>]+", re.I)


def redact(text: str, channel: Channel) -> str:
    """An error message fit for the page: the channel's target and secret, and any URL (an
    apprise URL carries tokens), replaced by their masked form."""
    secrets = []
    for attr in ("target", "secret"):
        try:
            secrets.append(getattr(channel, attr))
        except ValueError:  # cannot decrypt: then it cannot leak either
            pass
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, crypto.mask(secret))
    return URL.sub(lambda m: crypto.mask(m.group(0)), text)


@dataclass
class Failure:
    error_class: str
    message: str
    retry: bool = True  # False: these notifications fail now
    disable: bool = False  # True: the channel cannot work until someone fixes it


def failure(exc: BaseException, channel: Channel) -> Failure:
    """What a send's exception means for the notifications and the channel."""
    if isinstance(exc, channels.TransportError):
        return Failure("TransportError", exc.message, not exc.permanent, exc.permanent)
    if isinstance(exc, crypto.KeyChanged):
        return Failure("KeyChanged", f"{exc}: re-enter the channel's target", False, True)
    if isinstance(exc, BadHeaderError):
        return Failure("BadHeaderError", "the e-mail could not be built (a header has a line "
                       f"break): {redact(str(exc), channel)}", retry=False)
    return Failure(type(exc).__name__, redact(f"{exc}", channel) or type(exc).__name__)


def _claim(channel: Channel, ids: list[int] | None, now: dt.datetime) -> list[Notification]:
    with transaction.atomic():
        qs = Notification.objects.filter(channel=channel, status=NotificationStatus.PENDING)
        qs = qs.filter(id__in=ids) if ids is not None else qs.filter(next_attempt_at__lte=now)
        claimed = list(qs.select_for_update(skip_locked=True).order_by("created_at", "id"))
        Notification.objects.filter(id__in=[n.id for n in claimed]).update(
            status=NotificationStatus.SENDING, attempts=F("attempts") + 1,
            next_attempt_at=now)  # while sending: when it was claimed (see stale_sending)
    return claimed


def deliver(channel: Channel, ids: list[int] | None = None,
            now: dt.datetime | None = None) -> list[Notification]:
    """Send this channel's due pending notifications as one message; returns them updated."""
    now = now or timezone.now()
    if not channel.enabled:
        return []
    digest = ids is None and bool(channel.digest)
    if digest and not channel.digest_due(now):
        return []
    if channel.kind == ChannelKind.EMAIL and (held := email_cap_until(channel, now)):
        # The team's hourly e-mail cap is reached: hold the due rows (not failed, not sent)
        # until the oldest counted message is an hour old, and say so on them.
        qs = Notification.objects.filter(channel=channel, status=NotificationStatus.PENDING)
        qs = qs.filter(id__in=ids) if ids is not None else qs.filter(next_attempt_at__lte=now)
        held_ids = list(qs.values_list("id", flat=True))
        Notification.objects.filter(id__in=held_ids).update(
            next_attempt_at=held, error_class="HourlyCap",
            error=f"the team's cap of {settings.ALERTS_EMAIL_HOURLY_CAP} alert e-mails an "
                  f"hour is reached; held until {held:%H:%M} UTC")
        return list(Notification.objects.filter(id__in=held_ids))
    rows = _claim(channel, ids, now)
    if not rows:
        return []
    ids = [n.id for n in rows]
    message = render(channel.team.name, [with_links(n.payload, channel) for n in rows])
    if digest:
        message.title = f"{channel.get_digest_display()}: {len(rows)} alert " \
                        f"notification{'s' if len(rows) != 1 else ''} · {channel.team.name}"
    try:
        channels.transport_for(channel).send(message)
    except Exception as exc:  # every failure is recorded on the rows, none escapes the worker
        f = failure(exc, channel)
        log.warning("channel %s: %s: %s", channel.id, f.error_class, f.message)
        attempts = rows[0].attempts + 1
        error = f.message[:500]
        if f.disable:
            channel.disable(error)
        retry = f.retry and attempts < settings.ALERTS_MAX_ATTEMPTS and not any(
            n.kind == NotificationKind.TEST for n in rows)
        Notification.objects.filter(id__in=ids).update(
            status=NotificationStatus.PENDING if retry else NotificationStatus.FAILED,
            error=error, error_class=f.error_class[:80], next_attempt_at=now + backoff(attempts))
        Channel.objects.filter(id=channel.id).update(last_error=error, last_error_at=now)
    else:
        Notification.objects.filter(id__in=ids).update(status=NotificationStatus.SENT,
                                                       sent_at=timezone.now(), error="",
                                                       error_class="")
        done = {"last_delivery_at": timezone.now()}
        if digest:
            done["last_digest_at"] = now
        Channel.objects.filter(id=channel.id).update(**done)
        for key, value in done.items():
            setattr(channel, key, value)
    return list(Notification.objects.filter(id__in=ids))


def email_cap_until(channel: Channel, now: dt.datetime) -> dt.datetime | None:
    """When the team may send alert e-mail again, or None if it may now. A message is the
    rows one delivery sent together (same channel, same sent_at)."""
    since = now - dt.timedelta(hours=1)
    sent = sorted({(c, t) for c, t in Notification.objects.filter(
        channel__team_id=channel.team_id, channel__kind=ChannelKind.EMAIL,
        status=NotificationStatus.SENT, sent_at__gt=since)
        .values_list("channel_id", "sent_at")}, key=lambda ct: ct[1])
    if len(sent) < settings.ALERTS_EMAIL_HOURLY_CAP:
        return None
    return sent[len(sent) - settings.ALERTS_EMAIL_HOURLY_CAP][1] + dt.timedelta(hours=1)


def due_channel_ids(now: dt.datetime | None = None) -> list[int]:
    """Channels with notifications due: now for immediate channels, at their slot for
    digest channels."""
    now = now or timezone.now()
    ids = set(Notification.objects.filter(
        status=NotificationStatus.PENDING, next_attempt_at__lte=now,
        channel__disabled_at__isnull=True).values_list("channel_id", flat=True))
    chans = Channel.objects.filter(id__in=ids).select_related("team")
    return sorted(c.id for c in chans if c.digest_due(now))


def live_payloads(channel: Channel, now: dt.datetime) -> list[dict]:
    """For "Send test": the current figures of the rules that use this channel (or, with no
    rule yet, the team's IT energy over the last 24 hours), rendered like a real alert."""
    from greenops.alerts import evaluate  # evaluate imports this module (it renders payloads)

    out = []
    for rule in channel.rules.filter(enabled=True).for_page()[:5]:
        seen = evaluate.observe(rule, now)
        out.append(payload(rule, NotificationKind.TEST, seen.value, seen.detail, seen.figure,
                           now))
    if out:
        return out
    tz = kpi_values.team_tz(channel.team)
    start, end = kpi_values.window_bounds("24h", now, tz)
    f = kpi_values.figure(kpi_values.Scope(channel.team), "energy_kwh", start, end)
    detail = ("no rule uses this channel yet; the team's IT energy over the last 24 whole "
              "hours is shown instead" + (f" ({f.reason})" if f.value is None else ""))
    return [{"kind": NotificationKind.TEST, "rule": "Test message", "rule_id": None,
             "rule_kind": "test", "team": channel.team.slug, "kpi": "energy_kwh",
             "kpi_label": kpi_values.KPIS["energy_kwh"].label, "value": f.value,
             "unit": f.unit, "threshold": None, "scope": f"team {channel.team.name}",
             "window": {"start": f.start.isoformat(), "end": f.end.isoformat(),
                        "label": kpi_values.WINDOWS["24h"][0]},
             "measured": not f.estimated, "estimated": f.estimated, "simulated": f.simulated,
             "detail": detail, "forecast": None,
             "url": absolute(reverse("alert-list", args=[channel.team.slug])),
             "explains": absolute(reverse("carbon-methodology")), "at": now.isoformat()}]


def queue_test(channel: Channel) -> list[int]:
    """"Send test", the part a page does: write the test messages (live figures read from
    this database, no remote call) as pending rows; a task sends them (tasks.send_test)."""
    now = timezone.now()
    return [Notification.objects.create(
        channel=channel, kind=NotificationKind.TEST, payload=p,
        dedupe_key=f"test:{uuid.uuid4().hex}").id for p in live_payloads(channel, now)]


def send_test(channel: Channel, ids: list[int] | None = None) -> Notification:
    """A real message through the real transport; the row records how it went. A test may go
    to a disabled channel: that is how someone checks a fix before enabling it. Runs in a
    worker: no web request waits on a remote server."""
    ids = ids if ids is not None else queue_test(channel)
    was_disabled = not channel.enabled
    if was_disabled:
        channel.disabled_at = None  # this send only; the row in the database stays disabled
    deliver(channel, ids, timezone.now())
    if was_disabled:
        channel.refresh_from_db()
    return Notification.objects.filter(id__in=ids).order_by("id").first()


def stale_sending(older_than: dt.timedelta = dt.timedelta(minutes=15)) -> int:
    """Rows a worker claimed and then died on: not resent (it may have been delivered), but
    marked failed so the page does not say "sending" for ever."""
    cutoff = timezone.now() - older_than
    return Notification.objects.filter(
        Q(status=NotificationStatus.SENDING) & Q(next_attempt_at__lt=cutoff)
    ).update(status=NotificationStatus.FAILED,
             error="the worker stopped during the send; not retried to avoid a duplicate")
