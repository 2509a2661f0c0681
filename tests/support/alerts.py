"""Helpers for the alerts tests: seeded KPI rollups, rules and channels."""

from __future__ import annotations

import datetime as dt
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from greenops.alerts.models import Channel, EmailAddress, Rule
from greenops.kpis.models import KpiRollup

UTC = dt.UTC
# A fixed "now": Tuesday 10 Nov 2026, 10:30 UTC. Rolling 1 h windows are [09:00, 10:00).
NOW = dt.datetime(2026, 11, 10, 10, 30, tzinfo=UTC)


def hour(h: int, day: int = 10, month: int = 11) -> dt.datetime:
    return dt.datetime(2026, month, day, h, tzinfo=UTC)


def rollup(team, bucket: dt.datetime, workload=None, **fields) -> KpiRollup:
    """One hourly KPI rollup row, as greenops.kpis.rollup writes them."""
    fields.setdefault("gpu_minutes", 60)
    return KpiRollup.objects.update_or_create(team=team, workload=workload, period="hour",
                                              bucket=bucket, defaults=fields)[0]


def confirmed(team, address: str) -> EmailAddress:
    """An address outside the team that clicked its confirmation link."""
    return EmailAddress.objects.get_or_create(
        team=team, address=address,
        defaults={"token": f"tok-{address}", "confirmed_at": NOW})[0]


def email_channel(team, name: str = "oncall", **kw) -> Channel:
    ch = Channel(team=team, name=name, kind="email", **kw)
    ch.set_target("oncall@example.com")
    ch.save()
    confirmed(team, "oncall@example.com")
    return ch


def make_rule(team, channels=(), **fields) -> Rule:
    defaults = {"name": "rule", "kind": "threshold", "kpi": "energy_per_inference_j",
                "window": "1h", "direction": "above", "fire_level": 2.0, "for_minutes": 0,
                "state_since": NOW - dt.timedelta(days=1)}
    rule = Rule.objects.create(team=team, **{**defaults, **fields})
    rule.channels.set(channels)
    return rule


RULE_FORM = {"name": "Idle GPUs", "kind": "threshold", "kpi": "gpu_util_pct", "window": "1h",
             "direction": "below", "fire_level": "10", "for_minutes": "5",
             "keep_firing_minutes": "0", "no_data": "nodata", "repeat_minutes": "240",
             "enabled": "on"}


class Receiver:
    """A real HTTP server on 127.0.0.1 that records each request (path, headers, body) and
    answers `status` with `headers` and `body`."""

    def __init__(self, status: int = 200, body: bytes = b"", headers: dict | None = None) -> None:
        self.status, self.body, self.headers = status, body, headers or {}
        self.requests: list = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                receiver.requests.append((self.path, self.headers, body, self.command))
                self.send_response(receiver.status)
                for k, v in receiver.headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(receiver.body)))
                self.end_headers()
                self.wfile.write(receiver.body)

            do_POST = do_GET = _answer  # noqa: N815

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class RaisingEmailBackend:
    """EMAIL_BACKEND for a test: raises `RaisingEmailBackend.exc` on send."""

    exc: Exception = RuntimeError("set RaisingEmailBackend.exc")

    def __init__(self, *args, **kwargs) -> None:
        pass

    def send_messages(self, messages) -> int:
        raise type(self).exc
