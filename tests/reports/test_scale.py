"""A report's host rows at fleet size (issue 35 item 4): the queries per host do not include
reading that host's GPUs and site one host at a time (125 hosts at 1,000 GPUs, twice: the month
and the one before)."""

from __future__ import annotations

import datetime as dt

from django.db import connection
from django.test.utils import CaptureQueriesContext

from greenops.reports import month_figures
from tests.support.factories import make_host

UTC = dt.UTC
OCT = month_figures.Month(2026, 10)
AFTER = dt.datetime(2026, 11, 3, tzinfo=UTC)


def _queries(team) -> list[str]:
    with CaptureQueriesContext(connection) as q:
        month_figures.month_figures(team, OCT, now=AFTER)
    return [x["sql"] for x in q.captured_queries]


def _reading(sqls: list[str], table: str, where: str) -> int:
    """Queries that read `table` filtered by `where` (one host's rows)."""
    return sum(1 for sql in sqls if f'FROM "{table}"' in sql and where in sql)


def _hours(host) -> None:
    from greenops.telemetry.models import GpuHour

    start = dt.datetime(2026, 10, 5, tzinfo=UTC)
    GpuHour.objects.bulk_create([
        GpuHour(gpu=g, bucket=start + dt.timedelta(hours=h), samples=60, util_sum=3000.0,
                util_n=60, energy_j=1000.0) for g in host.gpus.all() for h in range(3)])


def test_the_hosts_gpus_and_sites_are_read_once_per_month_not_per_host(team):
    """3 hosts: the report's host rows read the GPUs and the sites of all hosts in one query
    each per month (October and September: 2), where they were read per host (3 x 2 = 6)."""
    for n in range(3):
        host, _ = make_host(team, f"node-{n}", gpus=2)
        _hours(host)
    sqls = _queries(team)
    per_host_gpus = _reading(sqls, "telemetry_gpu", '"telemetry_gpu"."host_id" = ')
    all_gpus = _reading(sqls, "telemetry_gpu", '"telemetry_gpu"."host_id" IN (')
    assert per_host_gpus == 0, per_host_gpus
    assert all_gpus >= 2
    assert _reading(sqls, "carbon_hostsite", '"carbon_hostsite"."host_id" IN (') == 2
