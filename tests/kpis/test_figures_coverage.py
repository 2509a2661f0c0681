"""Coverage travels with the figure (issue 29, item 4): every period figure carries the share of
host-hours measured; a change between periods is flagged, not a bare percentage, when either
side measured under GREENOPS_COMPARE_MIN_COVERAGE (90 %); the running month says "so far".

KPIs, by hand ("now" = 2026-12-04 14:05 UTC, range "day" = [3 Dec 14:00, 4 Dec 14:00)): one host
(enrolled long before) reports 1 GPU-hour of 3.6 MJ in each of the 24 hours, and in 20 of the
24 hours before. Both sides have 20+ hour rows, so the old rule (previous >= 80 % of the
current's buckets) showed a change of (24 - 20) / 20 = +20 %; the previous day measured 20 of
24 host-hours = 83 %, under 90 %: the change is flagged instead.

Report: November (team in UTC) with every one of its 720 host-hours measured, October with 1 of
the 4 host-hours the host existed (enrolled 31 Oct 20:00): 25 % -- the change is flagged.
"""

from __future__ import annotations

import datetime as dt
from unittest import mock

import pytest

from greenops.windows import HOUR
from tests.support.factories import make_host

UTC = dt.UTC
NOW = dt.datetime(2026, 12, 4, 14, 5, tzinfo=UTC)


def _hours(gpu, hours, joules=3.6e6):
    from greenops.telemetry.models import GpuHour

    GpuHour.objects.bulk_create([
        GpuHour(gpu=gpu, bucket=h, samples=60, util_sum=3000.0, util_n=60, energy_j=joules,
                util_minutes=60, idle_minutes=0) for h in hours])


def test_kpi_change_is_flagged_under_90_percent_of_host_hours(client, users, team):
    from greenops.kpis import queries, rollup
    from greenops.telemetry.models import Host

    host, _ = make_host(team, "a", gpus=1)
    Host.objects.filter(id=host.id).update(created_at=NOW - dt.timedelta(days=30))
    end = NOW.replace(minute=0)
    today = [end - (i + 1) * HOUR for i in range(24)]
    before = [end - dt.timedelta(days=1) - (i + 1) * HOUR for i in range(20)]
    _hours(host.gpus.get(), today + before)
    rollup.rebuild(team, end - dt.timedelta(days=2), end)
    ov = queries.overview(team, None, "day", NOW)
    assert ov["coverage"]["share"] == 1.0 and ov["coverage"]["text"] == \
        "100 % of host-hours measured (24 of 24)"
    assert ov["previous_coverage"]["share"] == pytest.approx(20 / 24)
    assert not ov["previous_partial"]  # the old bucket rule would have compared them
    assert ov["change_pct"]["energy_kwh"] is None and not ov["comparable"]
    assert ov["coverage_flag"] == ("change not shown: the previous period measured 83 % of "
                                   "its host-hours (under 90 %)")
    client.force_login(users["member"])
    with mock.patch("django.utils.timezone.now", return_value=NOW):
        html = client.get(f"/teams/{team.slug}/kpis/?range=day").content.decode()
        home = client.get(f"/teams/{team.slug}/?range=day").content.decode()
    assert "100 % of host-hours measured (24 of 24)" in html
    flag = ov["coverage_flag"][0].upper() + ov["coverage_flag"][1:]
    assert flag in html and flag in home  # said once, beside the coverage
    assert "change not shown: coverage" in html  # and each card says why it has no change
    assert "% vs" not in html


def test_report_change_against_a_barely_measured_month_is_flagged(team, settings):
    from greenops.kpis.models import KpiRollup, Period
    from greenops.reports import month_figures, present
    from greenops.telemetry.models import Host

    host, _ = make_host(team, "a", gpus=1)
    Host.objects.filter(id=host.id).update(
        created_at=dt.datetime(2026, 10, 31, 20, tzinfo=UTC))
    nov = [dt.datetime(2026, 11, 1, tzinfo=UTC) + i * HOUR for i in range(720)]
    _hours(host.gpus.get(), [dt.datetime(2026, 10, 31, 22, tzinfo=UTC), *nov], 1.0)
    # Coverage reads the host-hours measured from the team's KPI hour rows (as the report's
    # carbon figures do): one per measured hour, as rollup.rollup_hour writes them (its count is
    # tested in test_host_hours_rollup.py; rebuilding 721 hours here would take ~15 s).
    KpiRollup.objects.bulk_create([
        KpiRollup(team=team, period=Period.HOUR, bucket=h, gpu_minutes=60, gpu_energy_j=1.0,
                  hosts_measured=1, hosts_unenrolled=0)
        for h in [dt.datetime(2026, 10, 31, 22, tzinfo=UTC), *nov]])
    fig = month_figures.month_figures(team, month_figures.Month(2026, 11), now=NOW)
    assert fig["coverage"]["share"] == 1.0
    assert fig["previous_coverage"]["share"] == 0.25  # 1 of 4 host-hours
    assert fig["change_flag"] == ("change not shown: the previous period measured 25 % of its "
                                  "host-hours (under 90 %)")
    assert all(v is None for v in fig["change_pct"].values())
    table = present.summary(fig)
    assert {row[3] for row in table.rows} == {"flagged: coverage"}
    assert any("25 % of host-hours measured (1 of 4)" in n for n in table.notes)
    # With the threshold lowered to 20 % the same months compare again.
    settings.GREENOPS_COMPARE_MIN_COVERAGE = 0.2
    fig = month_figures.month_figures(team, month_figures.Month(2026, 11), now=NOW)
    assert fig["change_flag"] == ""
