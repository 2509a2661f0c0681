"""The team home's KPI figures (cards, month to date, daily bars) are computed once per change
of what they read -- the team's KPI rollups, its workloads, the hour and the month -- and kept
in the cache in between: the same figures as computing them, never stale after a rollup."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

NOW = dt.datetime(2026, 11, 30, 12, 30, tzinfo=dt.UTC)
DAY = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)


def hour_rows(team, day: dt.datetime, joules: float) -> None:
    """24 hour rows of `joules` of GPU energy each, written by hand (not through the writer)."""
    from greenops.kpis.models import KpiRollup, Period

    KpiRollup.objects.bulk_create([
        KpiRollup(team=team, period=Period.HOUR, bucket=day + dt.timedelta(hours=h),
                  gpu_energy_j=joules, util_sum=50.0, util_n=1, gpu_minutes=60,
                  measured_s=3600.0)
        for h in range(24)])


def kpi_queries(queries) -> int:
    return sum("kpis_kpirollup" in q["sql"] for q in queries.captured_queries)


def test_kept_until_the_rollup_writer_changes_a_row(db, team, django_capture_on_commit_callbacks):
    """The 30-day cards read the 29th's 24 hour rows of 1 kWh (no day row yet): 24 kWh. Rows
    written by hand for the 28th (not through the writer) are not seen -- the views between
    read no KPI rollup at all -- until rollup_day, the one writer, merges the 28th's hours into
    its day row: the next view shows 48 kWh."""
    from dashboards import headline
    from greenops.kpis import rollup

    hour_rows(team, DAY, 3.6e6)
    first = headline.page_figures(team, "month", NOW)[1]
    assert first == headline.kpi_figures(team, "month", NOW)
    assert first["overview"]["current"]["energy_kwh"] == pytest.approx(24.0)
    before = DAY - dt.timedelta(days=1)
    hour_rows(team, before, 3.6e6)
    with CaptureQueriesContext(connection) as queries:
        assert headline.page_figures(team, "month", NOW)[1] == first
    assert kpi_queries(queries) == 0
    with django_capture_on_commit_callbacks(execute=True):
        rollup.rollup_day(team, before)  # the one writer: the generation moves once committed
    after = headline.page_figures(team, "month", NOW)[1]
    assert after["overview"]["current"]["energy_kwh"] == pytest.approx(48.0)
    assert after == headline.kpi_figures(team, "month", NOW)
    # Deleting through the writer moves it too: the hours gone, the day rows go.
    from greenops.kpis.models import KpiRollup, Period

    KpiRollup.objects.filter(team=team, period=Period.HOUR).delete()
    with django_capture_on_commit_callbacks(execute=True):
        rollup.rollup_day(team, DAY)
        rollup.rollup_day(team, before)
    assert not headline.page_figures(team, "month", NOW)[1]["overview"]["current"].get("energy_kwh")


def test_not_moved_before_the_commit(db, team, django_capture_on_commit_callbacks):
    """A view between the writer's statement and its commit must not store the old rows'
    figures under the new generation: the bump waits for the commit."""
    from greenops.kpis import rollup

    hour_rows(team, DAY, 3.6e6)
    before = rollup.generation(team.id)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        rollup.rollup_day(team, DAY)
    assert rollup.generation(team.id) == before and len(callbacks) == 1
    callbacks[0]()
    assert rollup.generation(team.id) == before + 1


def test_key_follows_the_hour_the_month_the_team_and_its_workloads(db, team, other_team):
    from dashboards import headline
    from greenops.workloads.models import Workload

    key = headline.kpis_key(team, "day", NOW)
    assert headline.kpis_key(team, "day", NOW + dt.timedelta(minutes=29)) == key
    assert headline.kpis_key(team, "day", NOW + dt.timedelta(minutes=30)) != key  # next hour
    assert headline.kpis_key(team, "hour", NOW) == key  # the last hour shows the day's cards
    assert headline.kpis_key(team, "week", NOW) != key
    assert headline.kpis_key(other_team, "day", NOW) != key
    # A team id used again (a new database beside the same cache) is another team.
    reborn = type(team)(id=team.id, name=team.name, slug=team.slug, time_zone=team.time_zone,
                        created_at=team.created_at + dt.timedelta(microseconds=1))
    assert headline.kpis_key(reborn, "day", NOW) != key
    # Kolkata's month starts at 18:30 UTC: 18:20 and 18:40 on the 30th are in the same UTC
    # hour but different months of the team.
    team.time_zone = "Asia/Kolkata"
    late = NOW.replace(hour=18, minute=20)
    assert headline.kpis_key(team, "day", late) != headline.kpis_key(
        team, "day", late + dt.timedelta(minutes=20))
    # Workload names label the daily bars: registering one moves the team's generation.
    key = headline.kpis_key(team, "day", NOW)
    Workload.objects.create(team=team, name="llama-serve", kind="inference")
    assert headline.kpis_key(team, "day", NOW) != key


def test_home_shows_the_new_figures_after_a_rollup(client, users, team,
                                                   django_capture_on_commit_callbacks):
    from unittest import mock

    from greenops.kpis import rollup

    hour_rows(team, DAY, 3.6e6)
    client.force_login(users["member"])
    url = f"/teams/{team.slug}/?range=month"
    before = DAY - dt.timedelta(days=1)
    with mock.patch("django.utils.timezone.now", return_value=NOW):
        html = client.get(url).content.decode()
        assert 'data-kpi="energy_kwh">24.00 kWh' in html  # the 29th's hours
        hour_rows(team, before, 3.6e6)  # by hand: not seen until the writer runs
        assert 'data-kpi="energy_kwh">24.00 kWh' in client.get(url).content.decode()
        with django_capture_on_commit_callbacks(execute=True):
            rollup.rollup_day(team, before)
        html = client.get(url).content.decode()
    assert 'data-kpi="energy_kwh">48.00 kWh' in html


def test_a_cache_that_is_down_does_not_fail_the_rollup(db, team, monkeypatch,
                                                        django_capture_on_commit_callbacks):
    """The rows are committed before the counter moves: a cache error then is logged, and the
    rollup's rows are there."""
    from django.core.cache import cache

    from greenops.kpis import rollup
    from greenops.kpis.models import KpiRollup, Period

    def down(*args, **kwargs):
        raise ConnectionError("Redis is down")

    hour_rows(team, DAY, 3.6e6)
    monkeypatch.setattr(cache, "incr", down)
    monkeypatch.setattr(cache, "set", down)
    with django_capture_on_commit_callbacks(execute=True):
        rollup.rollup_day(team, DAY)
    assert KpiRollup.objects.get(team=team, period=Period.DAY, bucket=DAY).gpu_energy_j == (
        24 * 3.6e6)
