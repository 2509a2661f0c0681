"""Helpers for the alerts tests: seeded KPI rollups, rules and channels."""

from __future__ import annotations

import datetime as dt
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from greenops.alerts.models import Channel, Rule
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


def email_channel(team, name: str = "oncall", **kw) -> Channel:
    ch = Channel(team=team, name=name, kind="email", **kw)
    ch.set_target("oncall@example.com")
    ch.save()
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
    """A loopback HTTP server that records requests and answers with `status`."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.requests: list = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((self.path, self.headers, body))  # case-insensitive
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
