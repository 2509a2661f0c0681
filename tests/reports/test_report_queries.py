"""A month's report reads the same number of queries for 2 hosts as for 6 (issue 35 item 4:
at 1,000 GPUs the report read ~26 queries per host, 7,295 in all, and took 1,799 s)."""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter

from django.db import connection
from django.test.utils import CaptureQueriesContext

from greenops.reports import month_figures
from greenops.telemetry.models import GpuHour, Host
from tests.support.costs import enrolled, only_prices
from tests.support.factories import make_host

UTC = dt.UTC
OCT = month_figures.Month(2026, 10)
START = dt.datetime(2026, 10, 1, tzinfo=UTC)
AFTER = dt.datetime(2026, 11, 3, tzinfo=UTC)


def _host(team, n: int) -> None:
    host, _ = make_host(team, f"node-{n}", gpus=2)
    enrolled(host, START - dt.timedelta(days=60))
    # Busy every third hour of October, idle (2 %) the others: every host gets a rightsize
    # and an idle check, the paths that looked things up host by host.
    GpuHour.objects.bulk_create([
        GpuHour(gpu=g, bucket=START + dt.timedelta(hours=h), samples=60,
                util_sum=(60.0 if h % 3 == 0 else 2.0) * 60, util_n=60, energy_j=720_000.0,
                mem_used_max_mib=8_000, util_minutes=60, idle_minutes=0 if h % 3 == 0 else 60)
        for g in host.gpus.all() for h in range(31 * 24)])


def _queries(team) -> list[str]:
    month_figures.month_figures(team, OCT, now=AFTER)  # first pricing records terms, factors
    with CaptureQueriesContext(connection) as q:
        figures = month_figures.month_figures(team, OCT, now=AFTER)
    assert len(figures["hosts"]) == Host.objects.filter(team=team).count()
    return [x["sql"] for x in q.captured_queries]


def _shape(sql: str) -> str:
    """A query without its literals, to name the ones that grew."""
    return re.sub(r"'[^']*'|\b\d+\b|_django_curs_\w+", "?", sql)[:300]


def test_a_reports_queries_do_not_grow_with_its_hosts(team):
    only_prices(on_demand="32.00")
    for n in range(2):
        _host(team, n)
    two = _queries(team)
    for n in range(2, 6):
        _host(team, n)
    six = _queries(team)
    extra = Counter(map(_shape, six)) - Counter(map(_shape, two))
    assert len(six) == len(two), extra
