"""Host-hours measured come from the KPI team rows (issue 35 item 2): rollup.rollup_hour counts
the hosts with a GPU sample in its hour (KpiRollup.hosts_measured) and those measured outside
their enrollment (hosts_unenrolled), so queries.host_hours reads one row per bucket instead of
every GPU-hour of the team -- with the figures the GPU-hour count gave.

By hand, period P = [29 Nov 00:00, 30 Nov 02:00) UTC, 26 hours; hours a = 29 Nov 10:00,
b = 29 Nov 23:00, c = 30 Nov 00:00, d = 30 Nov 01:00:
  A  8 GPUs, enrolled long before; all 8 report at a, b, c, d  -> expected 26, measured 4 (not 32)
  B  enrolled 30 Nov 00:20 (its hours from 00:00): expected c, d = 2; reports c, d, and a
     (a replayed spool, before it was created: measured, and an hour of the period) -> measured
     3, outside 1
  C  removed 29 Nov 10:30: expected 00:00..10:00 = 11; reports a (enrolled then) and c (after
     its removal: outside) -> measured 2, outside 1
  D  enrolled long before, never reports -> expected 26, measured 0
expected = 26 + 2 + 11 + 26 + 2 outside = 67; measured = 4 + 3 + 2 = 9: 13 % (9 of 67).
Rows: a 3 hosts (1 outside: B), b 1, c 3 (1 outside: C), d 2; the 29 Nov day row 4 (1).
"""

from __future__ import annotations

import datetime as dt
import importlib

from django.apps import apps
from django.db.models import F, Q

from greenops import windows
from greenops.kpis import queries, rollup
from greenops.kpis.models import KpiRollup, Period
from greenops.telemetry.models import GpuHour, Host
from tests.support.factories import make_host

UTC = dt.UTC
START, END = dt.datetime(2026, 11, 29, tzinfo=UTC), dt.datetime(2026, 11, 30, 2, tzinfo=UTC)
A_, B_ = dt.datetime(2026, 11, 29, 10, tzinfo=UTC), dt.datetime(2026, 11, 29, 23, tzinfo=UTC)
C_, D_ = dt.datetime(2026, 11, 30, 0, tzinfo=UTC), dt.datetime(2026, 11, 30, 1, tzinfo=UTC)


def _report(host, hours) -> None:
    GpuHour.objects.bulk_create([
        GpuHour(gpu=g, bucket=h, samples=60, util_sum=3000.0, util_n=60, energy_j=3.6e6,
                util_minutes=60, idle_minutes=0) for g in host.gpus.all() for h in hours])


def _fleet(team) -> None:
    long_ago = START - dt.timedelta(days=30)
    a, _ = make_host(team, "a", gpus=8)
    b, _ = make_host(team, "b", gpus=1)
    c, _ = make_host(team, "c", gpus=2)
    d, _ = make_host(team, "d", gpus=1)
    Host.objects.filter(id__in=[a.id, c.id, d.id]).update(created_at=long_ago)
    Host.objects.filter(id=b.id).update(created_at=C_ + dt.timedelta(minutes=20))
    Host.objects.filter(id=c.id).update(removed_at=A_ + dt.timedelta(minutes=30))
    _report(a, [A_, B_, C_, D_])
    _report(b, [A_, C_, D_])
    _report(c, [A_, C_])
    for hour in (A_, B_, C_, D_):
        rollup.rollup_hour(team, hour)
    for day in (START, C_):
        rollup.rollup_day(team, day)


def _from_gpu_hours(team, start, end) -> tuple[int, int]:
    """(measured, outside) as host_hours counted them before: distinct (host, hour) over every
    GPU-hour of the team in the window."""
    rows = GpuHour.objects.filter(gpu__host__team=team, bucket__gte=start, bucket__lt=end,
                                  samples__gt=0)
    pairs = rows.values("gpu__host_id", "bucket").distinct()
    outside = rows.filter(Q(bucket__lte=F("gpu__host__created_at") - windows.HOUR)
                          | Q(bucket__gte=F("gpu__host__removed_at")))
    return pairs.count(), outside.values("gpu__host_id", "bucket").distinct().count()


def test_host_hours_from_the_team_rows_equal_the_hand_count(team):
    _fleet(team)
    team_rows = KpiRollup.objects.filter(team=team, workload__isnull=True)
    hours = dict((r.bucket, (r.hosts_measured, r.hosts_unenrolled))
                  for r in team_rows.filter(period=Period.HOUR))
    assert hours == {A_: (3, 1), B_: (1, 0), C_: (3, 1), D_: (2, 0)}
    day = team_rows.get(period=Period.DAY, bucket=START)
    assert (day.hosts_measured, day.hosts_unenrolled) == (4, 1)
    cov = queries.host_hours(team, START, END)  # 29 Nov from its day row, 30 Nov from hours
    assert (cov["measured"], cov["expected"]) == (9, 67)
    assert cov["text"] == "13 % of host-hours measured (9 of 67)"
    assert _from_gpu_hours(team, START, END) == (9, 2)  # what the GPU-hour count gave
    # A window of hours only (no whole day): b, c, d -> A 3, B 2 (c, d), C 1 (c, outside).
    cov = queries.host_hours(team, B_, END)
    assert (cov["measured"], cov["expected"]) == (6, 3 + 2 + 0 + 3 + 1)
    assert _from_gpu_hours(team, B_, END) == (6, 1)


def test_migration_fills_existing_team_rows_as_the_rollup_counts(team):
    _fleet(team)
    before = sorted(KpiRollup.objects.filter(workload__isnull=True).values_list(
        "period", "bucket", "hosts_measured", "hosts_unenrolled"))
    KpiRollup.objects.update(hosts_measured=None, hosts_unenrolled=None)
    migration = importlib.import_module("greenops.kpis.migrations.0008_rollup_hosts_measured")
    migration.fill(apps, None)
    after = sorted(KpiRollup.objects.filter(workload__isnull=True).values_list(
        "period", "bucket", "hosts_measured", "hosts_unenrolled"))
    assert after == before and len(after) == 6
