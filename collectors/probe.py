"""Small read-only calls to the server for `status`, `doctor` and `enroll`: its clock, and
whether it accepts this host's token. Standard library only."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from collectors.transport import USER_AGENT


@dataclass(frozen=True)
class Answer:
    status: int | None  # None: no HTTP answer (refused, timeout, DNS, bad URL)
    doc: dict | None  # the JSON body, if it was a JSON object
    error: str  # one line for a person when status is None or the body was not JSON
    rtt_s: float
    started_at: float  # wall clock just before sending, for the clock-skew midpoint

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.doc is not None

    def server_message(self) -> str:
        if self.doc and isinstance(self.doc.get("message"), str):
            return self.doc["message"]
        return self.error or f"HTTP {self.status}"


def request_json(url: str, *, token: str | None = None, body: dict | None = None,
                 timeout_s: float = 5.0) -> Answer:
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        headers["Content-Type"] = "application/json"
    started = time.time()
    t0 = time.monotonic()
    try:
        req = urllib.request.Request(url, data=data, headers=headers,
                                     method="POST" if data is not None else "GET")
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            status, raw = resp.status, resp.read(1 << 20)
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read(1 << 20)
    except ValueError as exc:  # urllib: "unknown url type" and friends
        return Answer(None, None, f"bad server URL {url!r}: {exc}", 0.0, started)
    except (TimeoutError, urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return Answer(None, None, f"{reason}", time.monotonic() - t0, started)
    rtt = time.monotonic() - t0
    try:
        doc = json.loads(raw)
    except ValueError:
        return Answer(status, None, f"HTTP {status}, not a JSON answer (is this a GreenOps "
                      "server?)", rtt, started)
    return Answer(status, doc if isinstance(doc, dict) else None, "", rtt, started)


def server_time(server: str, timeout_s: float = 3.0) -> tuple[Answer, float | None]:
    """The server's clock minus ours (seconds, + = we are behind), from GET /api/v1/time,
    compared with the midpoint of the round trip."""
    answer = request_json(server.rstrip("/") + "/api/v1/time", timeout_s=timeout_s)
    if not answer.ok or not isinstance(answer.doc.get("time"), (int, float)):
        return answer, None
    return answer, float(answer.doc["time"]) - (answer.started_at + answer.rtt_s / 2)


def whoami(server: str, token: str, timeout_s: float = 3.0) -> Answer:
    return request_json(server.rstrip("/") + "/api/v1/agent/whoami", token=token,
                        timeout_s=timeout_s)
