"""Host enrollment and the host token's lifecycle: issue, enroll, revoke, rotate, remove.

An admin issues a single-use enrollment token (valid ENROLL_TOKEN_TTL_MINUTES);
`greenops-agent enroll` trades it at POST /api/v1/enroll for the host's long-lived token,
registering the GPUs and the host's facts in the same call. Host tokens are stored hashed.
Revoking replaces the stored hash with the hash of a secret nobody holds, so every path that
looks hosts up by token hash (ingest, the API auth) rejects the old token without knowing about
revocation.
"""

from __future__ import annotations

import re
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from greenops.errors import FieldError, invalid
from greenops.teams import audit
from greenops.teams.models import AuditEvent, Team
from greenops.telemetry.ingest import register_inventory
from greenops.telemetry.models import (
    ENROLL_TOKEN_PREFIX,
    EnrollmentToken,
    Host,
    delete_measurements,
)
from greenops.telemetry.wire import json_int
from greenops.tokens import hash_token, new_token


def enroll_token_ttl() -> timedelta:
    """Read when a token is issued, so the Add host page's text and the token always agree."""
    return timedelta(minutes=settings.ENROLL_TOKEN_TTL_MINUTES)


# Each fact's limit is its column's, so a too-long value is a 422 naming it, never a 500.
FACT_FIELDS = {name: Host._meta.get_field(name).max_length for name in (
    "cpu_model", "instance_type", "region", "provider", "country", "facts_source")}
HOSTNAME_MAX = Host._meta.get_field("hostname").max_length


def issue_enrollment_token(team: Team, actor, now=None) -> tuple[EnrollmentToken, str]:
    """A fresh single-use token; the plaintext is returned once and never stored."""
    token = new_token(ENROLL_TOKEN_PREFIX)
    row = EnrollmentToken.objects.create(
        team=team, token_hash=hash_token(token), token_prefix=token[:10], created_by=actor,
        expires_at=(now or timezone.now()) + enroll_token_ttl())
    audit.record(team, actor, AuditEvent.Action.HOST_ENROLL_TOKEN, row.token_prefix + "…",
                 expires_at=row.expires_at.isoformat())
    return row, token


def _bad_token(code: str, message: str) -> FieldError:
    return FieldError(401, code, "token", message)


def _claim(token: str, now) -> EnrollmentToken:
    """Mark the enrollment token used, exactly once, or say why it cannot be."""
    if not isinstance(token, str) or not token.startswith(ENROLL_TOKEN_PREFIX):
        raise _bad_token("invalid_token", f"an enrollment token starts with {ENROLL_TOKEN_PREFIX}")
    row = EnrollmentToken.objects.select_related("team").filter(
        token_hash=hash_token(token)).first()
    if row is None:
        raise _bad_token("invalid_token", "unknown enrollment token")
    if row.used_at is not None:
        raise _bad_token("token_used", "this enrollment token was already used; "
                         "issue a new one on the Add host page")
    if row.expires_at <= now:
        raise _bad_token("token_expired", "this enrollment token has expired; "
                         "issue a new one on the Add host page")
    if EnrollmentToken.objects.filter(id=row.id, used_at__isnull=True).update(used_at=now) != 1:
        raise _bad_token("token_used", "this enrollment token was already used")
    return row


_NAME_OK = re.compile(r"[^A-Za-z0-9._-]+")


def _host_name(team: Team, hostname: str) -> str:
    """A team-unique host name from the machine's hostname (re-installs get -2, -3...)."""
    base = _NAME_OK.sub("-", hostname).strip("-")[:90] or "host"
    name, n = base, 1
    while Host.objects.filter(team=team, name=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def _facts(doc: dict) -> dict:
    facts = doc.get("facts", {})
    if not isinstance(facts, dict):
        raise invalid("facts", "must be an object")
    clean: dict = {}
    for key, limit in FACT_FIELDS.items():
        value = facts.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or len(value) > limit:
            raise invalid(f"facts.{key}", f"must be a string of at most {limit} characters")
        clean[key] = value
    ram = json_int(facts.get("ram_total_mib"))
    if ram is not None:
        if type(ram) is not int or not 0 < ram < 2**31:
            raise invalid("facts.ram_total_mib", "must be a positive integer")
        clean["ram_total_mib"] = ram
    return clean


def enroll(doc, now=None) -> tuple[Host, str]:
    """Create the host from an enrollment request; returns it and its token (shown once).

    Everything is validated before the token is spent, and a failure rolls the whole thing back,
    so a typo in the request does not burn the token.
    """
    now = now or timezone.now()
    if not isinstance(doc, dict):
        raise invalid("", "the enrollment request must be a JSON object")
    hostname = doc.get("hostname")
    if not isinstance(hostname, str) or not hostname.strip() or len(hostname) > HOSTNAME_MAX:
        raise invalid("hostname",
                      f"must be a non-empty string of at most {HOSTNAME_MAX} characters")
    facts = _facts(doc)
    with transaction.atomic():
        row = _claim(doc.get("token"), now)
        host = Host(team=row.team, name=_host_name(row.team, hostname), hostname=hostname,
                    **facts)
        token = host.set_new_token()
        try:
            with transaction.atomic():
                host.save()
        except IntegrityError:  # a concurrent enrollment took the same name
            host.name = _host_name(row.team, hostname + "-" + secrets.token_hex(2))
            host.save()
        register_inventory(host, {"agent_version": doc.get("agent_version", ""),
                                  "hostname": hostname, "gpus": doc.get("gpus")})
        # register_inventory stamps last_seen; an enrolled host whose agent has not started
        # yet must not look online, so "online" keeps meaning "the agent is running".
        Host.objects.filter(id=host.id).update(last_seen=None)
        EnrollmentToken.objects.filter(id=row.id).update(host=host)
        audit.record(row.team, None, AuditEvent.Action.HOST_ENROLLED, host.name,
                     actor_label=f"agent on {hostname}"[:150], token=row.token_prefix + "…",
                     gpus=host.gpus.count())
    host.refresh_from_db()
    return host, token


def _disable_token(host: Host) -> None:
    # Nobody knows this secret, so the column stays unique and no token matches it.
    host.token_hash = hash_token(new_token("revoked:"))
    host.token_prefix = ""


def revoke(host: Host, actor) -> None:
    """The host's token stops working at once; its data stays."""
    _disable_token(host)
    host.revoked_at = timezone.now()
    host.save(update_fields=["token_hash", "token_prefix", "revoked_at"])
    audit.record(host.team, actor, AuditEvent.Action.HOST_REVOKED, host.name)


def rotate(host: Host, actor) -> str:
    """A new token for the host (shown once); the old one stops working at once."""
    token = host.set_new_token()
    host.revoked_at = None
    host.save(update_fields=["token_hash", "token_prefix", "revoked_at"])
    audit.record(host.team, actor, AuditEvent.Action.HOST_ROTATED, host.name,
                 token=host.token_prefix + "…")
    return token


def remove(host: Host, actor) -> None:
    """Take the host off the list and disable its token. Its samples and rollups stay, so past
    reports still add up; deleting the history is a separate, deliberate step."""
    _disable_token(host)
    host.removed_at = host.revoked_at = timezone.now()
    host.save(update_fields=["token_hash", "token_prefix", "removed_at", "revoked_at"])
    audit.record(host.team, actor, AuditEvent.Action.HOST_REMOVED, host.name)


def delete_history(host: Host, actor) -> int:
    """Delete the host and everything measured on it; past reports change. Returns the number
    of raw samples deleted."""
    with transaction.atomic():
        deleted = delete_measurements(Host.objects.filter(id=host.id))
        team, name = host.team, host.name
        host.delete()
        audit.record(team, actor, AuditEvent.Action.HOST_DELETED, name, samples=deleted)
    return deleted
