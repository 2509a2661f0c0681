"""Notification channels: one class per kind behind a small registry (healthchecks' habit).

A transport raises TransportError; `permanent=True` means sending again cannot succeed (404 or
410 from a webhook, an invalid address or apprise URL), so the channel is disabled and says so.
Third-party services (Slack, Teams, PagerDuty, Opsgenie, Discord, Telegram, ntfy, ...) go through
apprise: its URL formats are documented at https://github.com/caronc/apprise/wiki.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import smtplib
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import orjson
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage
from django.core.validators import URLValidator, validate_email
from django.db import IntegrityError, transaction

from greenops.alerts.models import Channel, ChannelKind, Digest
from greenops.errors import invalid
from greenops.teams.models import Team


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
        for a in addresses:
            try:
                validate_email(a)
            except ValidationError:
                raise ValueError(f"{a!r} is not an e-mail address") from None
        return ", ".join(addresses)

    def send(self, message: Message) -> None:
        to = [a.strip() for a in self.channel.target.split(",")]
        try:
            EmailMessage(message.title, message.text, settings.DEFAULT_FROM_EMAIL, to).send()
        except smtplib.SMTPRecipientsRefused as exc:
            raise TransportError(f"recipients refused: {exc.recipients}", permanent=True) from None
        except (smtplib.SMTPException, OSError) as exc:
            raise TransportError(f"SMTP: {exc}") from None


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
        return target

    def send(self, message: Message) -> None:
        body = orjson.dumps(message.doc)
        ts = str(int(time.time()))
        req = urllib.request.Request(self.channel.target, data=body, method="POST", headers={
            "Content-Type": "application/json", "User-Agent": "GreenOps-alerts/1",
            "X-GreenOps-Timestamp": ts,
            "X-GreenOps-Signature": "sha256=" + signature(self.channel.secret, ts, body)})
        try:
            with urllib.request.urlopen(req, timeout=settings.ALERTS_HTTP_TIMEOUT_S) as resp:
                resp.read(1024)
        except urllib.error.HTTPError as exc:
            permanent = exc.code in self.PERMANENT_STATUS
            raise TransportError(f"HTTP {exc.code} from the webhook", permanent) from None
        except (urllib.error.URLError, OSError) as exc:
            raise TransportError(f"could not reach the webhook: {exc}") from None


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
        return target

    def send(self, message: Message) -> None:
        apprise = _apprise()
        ap = apprise.Apprise()
        if not ap.add(self.channel.target):
            raise TransportError("apprise no longer accepts this URL", permanent=True)
        with apprise.LogCapture(level=logging.WARNING) as log:
            ok = ap.notify(title=message.title, body=message.text)
            captured = log.getvalue().strip()
        if not ok:
            raise TransportError(f"apprise: {captured or 'delivery failed'}"[:500])


def create(team: Team, data: dict) -> tuple[Channel, str]:
    """Validate and store a channel; returns it and, for a webhook, its new signing secret."""
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
                 digest=digest, digest_hour=digest_hour)
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
