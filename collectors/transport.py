"""One HTTP POST to the GreenOps server (stdlib urllib), and what the answer means.

The classification lives here, in one place, because the shipper and the inventory both
need it: a response is delivered, refused for good, refused for the token, or worth a retry.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from collectors import __version__

USER_AGENT = f"greenops-agent/{__version__}"

DELIVERED = "delivered"  # 200/202: the server has it
AUTH = "auth"  # 401/403: keep the data, the token is wrong (an operator will fix it)
PERMANENT = "permanent"  # other 4xx: this exact request will never be accepted
RETRY = "retry"  # 408/429/5xx/network: try again later


@dataclass(frozen=True)
class Response:
    status: int | None  # None: no HTTP answer at all (refused, timeout, DNS...)
    body: str
    retry_after_s: float | None = None

    @property
    def outcome(self) -> str:
        s = self.status
        if s in (200, 201, 202):
            return DELIVERED
        if s in (401, 403):
            return AUTH
        if s is not None and 400 <= s < 500 and s not in (408, 429):
            return PERMANENT
        return RETRY

    def error_field(self) -> str | None:
        """The ``field`` of a JSON error answer, e.g. ``samples.gpu_index[3]``."""
        try:
            doc = json.loads(self.body)
        except ValueError:
            return None
        field = doc.get("field") if isinstance(doc, dict) else None
        return field if isinstance(field, str) else None

    def refused(self) -> list[dict]:
        """The ``refused`` items of an accepted answer (windows stored without these)."""
        try:
            doc = json.loads(self.body)
        except ValueError:
            return []
        items = doc.get("refused") if isinstance(doc, dict) else None
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    def describe(self) -> str:
        head = f"HTTP {self.status}" if self.status is not None else "no response"
        return f"{head}: {self.body[:500]}" if self.body else head


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After is either delay-seconds or an HTTP date (RFC 9110 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (now if now is not None else time.time()))


class HttpTransport:
    def __init__(self, server: str, token: str, timeout_s: float = 10.0) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def post(
        self, path: str, body: bytes, gzipped: bool, timeout_s: float | None = None
    ) -> Response:
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
        }
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        req = urllib.request.Request(self.server + path, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as resp:
                return Response(resp.status, _read_text(resp))
        except urllib.error.HTTPError as exc:
            return Response(
                exc.code, _read_text(exc), parse_retry_after(exc.headers.get("Retry-After"))
            )
        except (TimeoutError, urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            return Response(None, f"{type(exc).__name__}: {reason}")


    def probe(self, timeout_s: float = 2.0) -> bool:
        """Does the server answer at all? GET /api/v1/time: public, no database, tiny."""
        req = urllib.request.Request(self.server + "/api/v1/time",
                                     headers={"User-Agent": USER_AGENT})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return 200 <= resp.status < 300
        except (TimeoutError, urllib.error.URLError, http.client.HTTPException, OSError):
            return False


def _read_text(resp: object) -> str:
    try:
        return resp.read(64 * 1024).decode("utf-8", "replace")  # type: ignore[attr-defined]
    except (OSError, http.client.HTTPException):
        return ""
