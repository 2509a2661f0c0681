"""Helpers for the alerts tests: seeded KPI rollups, rules and channels."""

from __future__ import annotations

import datetime as dt

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
