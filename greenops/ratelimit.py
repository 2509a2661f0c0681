"""Failed-attempt limits for the endpoints that guess secrets: login and host enrollment.

Only failures count, in fixed windows kept in the cache (Redis in production, so all web
processes share them; per process on the embedded default). A person who mistypes a password a
few times is never stopped; a script trying passwords or enrollment tokens is, and is told when
to come back (429 with Retry-After)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest


@dataclass(frozen=True)
class Limit:
    scope: str
    failures: int  # allowed failures per window
    window_s: int


def login_limit() -> Limit:
    return Limit("login", settings.RATELIMIT_LOGIN_FAILURES, settings.RATELIMIT_WINDOW_S)


def enroll_limit() -> Limit:
    return Limit("enroll", settings.RATELIMIT_ENROLL_FAILURES, settings.RATELIMIT_WINDOW_S)


def client_ip(request: HttpRequest) -> str:
    # REMOTE_ADDR only: X-Forwarded-For is set by whoever sends the request. Behind a proxy, the
    # web server takes the client address from X-Forwarded-For only when the proxy is trusted
    # (WEB_FORWARDED_ALLOW_IPS, greenops/webserver.py).
    return request.META.get("REMOTE_ADDR", "") or "unknown"


def _key(limit: Limit, ident: str, now: float) -> tuple[str, int]:
    window = int(now // limit.window_s)
    return f"ratelimit:{limit.scope}:{ident}:{window}", (window + 1) * limit.window_s


def retry_after_s(limit: Limit, ident: str, now: float | None = None) -> int | None:
    """Seconds until `ident` may try again, or None if it is under its limit."""
    if not settings.RATELIMIT_ENABLED:
        return None
    now = time.time() if now is None else now
    key, window_end = _key(limit, ident, now)
    if (cache.get(key) or 0) < limit.failures:
        return None
    return max(1, int(window_end - now))


def record_failure(limit: Limit, ident: str, now: float | None = None) -> None:
    if not settings.RATELIMIT_ENABLED:
        return
    now = time.time() if now is None else now
    key, window_end = _key(limit, ident, now)
    if cache.add(key, 1, timeout=int(window_end - now) + 1):
        return
    try:
        cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=int(window_end - now) + 1)


def locked_probe(limit: Limit, ident: str) -> bool:
    """True for one request per RATELIMIT_LOCKED_PROBE_S of an ident over its limit: that one
    is checked (a valid secret succeeds), the others are refused unseen."""
    return cache.add(f"ratelimit:{limit.scope}:probe:{ident}", 1,
                     timeout=settings.RATELIMIT_LOCKED_PROBE_S)
