"""Notification channels: one class per kind behind a small registry (healthchecks' habit).

A transport raises TransportError; `permanent=True` means sending again cannot succeed (404 or
410 from a webhook, an invalid address or apprise URL), so the channel is disabled and says so.
Third-party services (Slack, Teams, PagerDuty, Opsgenie, Discord, Telegram, ntfy, ...) go through
apprise: its URL formats are documented at https://github.com/caronc/apprise/wiki.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import logging
import re
import secrets
import smtplib
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import orjson
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage
from django.core.validators import URLValidator, validate_email
from django.db import IntegrityError, transaction

from greenops import outbound
from greenops.alerts.models import Channel, ChannelKind, Digest, EmailAddress
from greenops.errors import invalid
from greenops.teams.models import Membership, Team

log = logging.getLogger(__name__)
APPRISE_STATUS = re.compile(r"error=(\d{3})\b")


class TransportError(Exception):
    def __init__(self, message: str, permanent: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent


@dataclass
class Message:
    title: str
    text: str
    doc: dict  # the JSON a webhook receives


class Transport:
    kind: str
    target_label: str = "Target"

    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    @classmethod
    def check_target(cls, target: str) -> str:
        """The cleaned target, or ValueError with a message for the `target` field."""
        raise NotImplementedError

    def send(self, message: Message) -> None:
        raise NotImplementedError


REGISTRY: dict[str, type[Transport]] = {}


def register(cls: type[Transport]) -> type[Transport]:
    REGISTRY[cls.kind] = cls
    return cls


def transport_for(channel: Channel) -> Transport:
    return REGISTRY[channel.kind](channel)


@register
class Email(Transport):
    """Through Django's email backend: the team's SMTP server is EMAIL_* in settings."""

    kind = ChannelKind.EMAIL
    target_label = "Addresses (comma-separated)"

    @classmethod
    def check_target(cls, target: str) -> str:
        addresses = [a.strip() for a in target.split(",") if a.strip()]
        if not addresses:
            raise ValueError("give at least one e-mail address")
        if len(addresses) > 10:
            raise ValueError("at most 10 addresses per channel")
        for a in addresses:
            try:
                validate_email(a)
            except ValidationError:
                raise ValueError(f"{a!r} is not an e-mail address") from None
        return ", ".join(addresses)

    def send(self, message: Message) -> None:
        wanted = [a.strip() for a in self.channel.target.split(",")]
        to = allowed_recipients(self.channel.team, wanted)
        if not to:
            raise TransportError("no recipient may receive it yet: addresses outside the team "
                                 "get alerts once they confirm through the link sent to them")
        subject = " ".join(message.title.split())  # a line break in a rule name is not a header
        try:
            EmailMessage(subject, message.text, settings.DEFAULT_FROM_EMAIL, to).send()
        except smtplib.SMTPRecipientsRefused as exc:
            raise TransportError(f"recipients refused: {exc.recipients}", permanent=True) from None
        except (smtplib.SMTPException, OSError) as exc:
            raise TransportError(f"SMTP: {exc}") from None


def refuse_literal(url: str) -> None:
    """A URL whose host is an IP address (or localhost) the guard would refuse is refused when
    the channel is saved. Names are not resolved here: the guard checks them at each send, on
    the address it connects to."""
    host = (urlsplit(url).hostname or "") if "://" in url else ""
    if host in ("localhost", "localhost.localdomain") or host.endswith(".localhost"):
        host = "127.0.0.1"
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return
    decision = outbound.decide(host)
    if not decision.allowed:
        hint = "" if "metadata" in decision.reason else \
            " (this server's operator can allow a private range for an on-premises receiver)"
        raise ValueError(f"{host} is a {decision.reason}: alerts are not sent inside the "
                         f"network{hint}")


def member_addresses(team: Team) -> set[str]:
    return {e.lower() for e in Membership.objects.filter(team=team).exclude(user__email="")
            .values_list("user__email", flat=True)}


def allowed_recipients(team: Team, addresses: list[str]) -> list[str]:
    """The addresses alert e-mail may go to: team members' own, and addresses that confirmed
    through the link sent to them. A team admin cannot make the server mail anyone."""
    ok = member_addresses(team) | {a.lower() for a in EmailAddress.objects.filter(
        team=team, confirmed_at__isnull=False).values_list("address", flat=True)}
    return [a for a in addresses if a.lower() in ok]


def needs_confirmation(team: Team, addresses: list[str]) -> list[EmailAddress]:
    """EmailAddress rows (new or waiting) for the addresses that are not members'."""
    members = member_addresses(team)
    out = []
    for a in addresses:
        if a.lower() in members:
            continue
        row, _ = EmailAddress.objects.get_or_create(
            team=team, address=a.lower(), defaults={"token": secrets.token_urlsafe(32)})
        if row.confirmed_at is None:
            out.append(row)
    return out


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """HMAC-SHA256 over "<timestamp>.<body>", hex: what a receiver recomputes to verify."""
    return hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


@register
class Webhook(Transport):
    kind = ChannelKind.WEBHOOK
    target_label = "URL (https://…)"
    PERMANENT_STATUS = (404, 410)

    @classmethod
    def check_target(cls, target: str) -> str:
        target = target.strip()
        try:
            URLValidator(schemes=["http", "https"])(target)
        except ValidationError:
            raise ValueError("must be an http:// or https:// URL") from None
        refuse_literal(target)
        return target

    def send(self, message: Message) -> None:
        body = orjson.dumps(message.doc)
        ts = str(int(time.time()))
        headers = {
            "Content-Type": "application/json", "User-Agent": "GreenOps-alerts/1",
            "X-GreenOps-Timestamp": ts,
            "X-GreenOps-Signature": "sha256=" + signature(self.channel.secret, ts, body)}
        try:
            resp = outbound.post(self.channel.target, body, headers,
                                 settings.ALERTS_HTTP_TIMEOUT_S)
        except (OSError, http.client.HTTPException) as exc:
            # Refused by the guard, refused by the host, filtered, reset: one sentence for the
            # user (the form must not map the network); the cause goes to the operator's log.
            log.warning("webhook channel %s: %s", self.channel.id, exc)
            raise TransportError(outbound.UNREACHABLE) from None
        if 300 <= resp.status < 400:
            raise TransportError(f"HTTP {resp.status} from the webhook: redirects are not "
                                 "followed; give the final URL")
        if resp.status >= 400:
            raise TransportError(f"HTTP {resp.status} from the webhook",
                                 resp.status in self.PERMANENT_STATUS)


def _apprise():
    """The apprise module: ~0.5 s and its plugins to import, so only when a channel uses it."""
    import apprise  # ~0.5 s and its plugins: only for a channel that uses it

    return apprise


@register
class Apprise(Transport):
    kind = ChannelKind.APPRISE
    target_label = "Apprise URL (slack://…, msteams://…, ntfy://…)"

    @classmethod
    def check_target(cls, target: str) -> str:
        apprise = _apprise()
        target = target.strip()
        if not apprise.Apprise().add(target):
            raise ValueError("apprise does not recognise this URL (see the apprise wiki for "
                             "each service's format)")
        refuse_literal(target)
        return target

    def send(self, message: Message) -> None:
        apprise = _apprise()
        # Sequential mode: the guard follows this thread (and its context), not a pool's.
        ap = apprise.Apprise(asset=apprise.AppriseAsset(async_mode=False))
        if not ap.add(self.channel.target):
            raise TransportError("apprise no longer accepts this URL", permanent=True)
        with apprise.LogCapture(level=logging.WARNING) as captured, outbound.guard():
            ok = ap.notify(title=message.title, body=message.text)
            text = captured.getvalue()
        if not ok:
            log.warning("apprise channel %s: %s", self.channel.id, text.strip()[:500])
            # Only the status, never the answer or the host: "error=503" in apprise's log.
            status = APPRISE_STATUS.search(text)
            if status:
                raise TransportError(f"apprise: the service answered HTTP {status.group(1)}")
            raise TransportError(f"apprise: {outbound.UNREACHABLE}")


def create(team: Team, data: dict, site_url: str = "") -> tuple[Channel, str]:
    """Validate and store a channel; returns it and, for a webhook, its new signing secret.
    `site_url`: the address the admin used ("https://host/"), for absolute links in its
    messages when SITE_URL is unset."""
    name = str(data.get("name") or "").strip()
    if not name or len(name) > 100:
        raise invalid("name", "give the channel a name (at most 100 characters)")
    kind = str(data.get("kind") or "")
    if kind not in REGISTRY:
        raise invalid("kind", f"must be one of {', '.join(REGISTRY)}")
    try:
        target = REGISTRY[kind].check_target(str(data.get("target") or ""))
    except ValueError as exc:
        raise invalid("target", str(exc)) from None
    digest = str(data.get("digest") or "")
    if digest not in Digest.values:
        raise invalid("digest", "one of daily, weekly, or empty for each alert as it happens")
    try:
        digest_hour = int(data.get("digest_hour") or 8)
    except (TypeError, ValueError):
        raise invalid("digest_hour", "must be an hour from 0 to 23") from None
    if not 0 <= digest_hour <= 23:
        raise invalid("digest_hour", "must be an hour from 0 to 23")
    ch = Channel(team=team, name=name, kind=kind, send_resolved=bool(data.get("send_resolved")),
                 digest=digest, digest_hour=digest_hour, site_url=site_url.rstrip("/")[:200])
    ch.set_target(target)
    secret = ""
    if kind == ChannelKind.WEBHOOK:
        secret = "whsec_" + secrets.token_urlsafe(32)
        ch.set_secret(secret)
    if Channel.objects.filter(team=team, name=name).exists():
        raise invalid("name", f"the team already has a channel called {name!r}")
    try:
        with transaction.atomic():
            ch.save()
    except IntegrityError:  # created by someone else between the check and the save
        raise invalid("name", f"the team already has a channel called {name!r}") from None
    return ch, secret
