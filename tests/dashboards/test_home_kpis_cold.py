"""No page waits on a cold cache, KPI cards included (issue 35 item 5): the team home computes
its KPI figures (cards, month to date, daily bars) in the request only when that is quick --
the team's last ones took under headline.KPI_INLINE_S, or with none kept, the team has at most
KPI_INLINE_HOSTS hosts. Otherwise it shows the last figures it had at the range with their time
("as of 12:30 UTC, refreshing") or says they are being computed, and queues
dashboards.tasks.refresh_team_kpis once (dashboards.refresh, shared with the cost snapshot).

Figures by hand: 24 KPI hour rows of 3.6 MJ of GPU energy each over the day range's window
([29 Nov 12:00, 30 Nov 12:00) at 12:30): 24 x 1 kWh = 24.00 kWh; the 29th's 12:00 row
rewritten to 7.2 MJ (2 kWh) makes it 23 + 2 = 25.00 kWh.
"""

from __future__ import annotations

import datetime as dt
import time
from unittest import mock

import pytest
from django.core.cache import cache
from django.utils import timezone

from tests.support.cards import card, figures_state
from tests.support.celery_worker import celery_worker
from tests.support.factories import make_host
from tests.support.polling import wait_for

NOW = dt.datetime(2026, 11, 30, 12, 30, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)


def day_rows(team, end: dt.datetime, joules: float = 3.6e6) -> None:
    """The 24 KPI hour rows before `end` (hour-aligned), `joules` of GPU energy each."""
    from greenops.kpis.models import KpiRollup, Period

    KpiRollup.objects.bulk_create([
        KpiRollup(team=team, period=Period.HOUR, bucket=end - (h + 1) * HOUR,
                  gpu_energy_j=joules, util_sum=50.0, util_n=1, gpu_minutes=60,
                  measured_s=3600.0, hosts_measured=1, hosts_unenrolled=0)
        for h in range(24)])


def _forget(team) -> None:
    """What a Redis restart loses for this team's KPI figures (a shared Redis: no clear())."""
    from dashboards import headline, tasks

    keys = [headline.kpis_key(team, "day", t) for t in (NOW, timezone.now())]
    cache.delete_many([*keys, headline.kpis_latest_key(team, "day"),
                       tasks.kpis_refresh_mark(team.id, "day"), tasks.refresh_mark(team.id)])


@pytest.fixture(autouse=True)
def _cold(team):
    _forget(team)
    yield
    _forget(team)


@pytest.fixture
def slow_kpis():
    """A team too large to compute its KPI figures in the request (the threshold lowered, so
    this test's one host is over it), and last figures that were not quick."""
    from dashboards import headline

    with mock.patch.object(headline, "KPI_INLINE_HOSTS", 0), \
            mock.patch.object(headline, "KPI_INLINE_S", 0.0):
        yield


def energy_card(html: str) -> str:
    return card(html, "energy_kwh")


def kpis_state(html: str) -> str:
    return figures_state(html, "kpis", absent="current")


def test_cold_cache_says_being_computed_then_the_refresh_fills_it(client, users, team,
                                                                  slow_kpis):
    from dashboards import headline

    make_host(team, "node-a", gpus=1)
    day_rows(team, NOW.replace(minute=0))
    client.force_login(users["owner"])
    url = f"/teams/{team.slug}/?range=day"
    with mock.patch("django.utils.timezone.now", return_value=NOW):
        with (mock.patch.object(headline, "kpi_figures", side_effect=AssertionError("in view")),
              mock.patch("greenops.queueing.run_after_response")):  # the refreshes held back
            first = client.get(url).content.decode()
        assert kpis_state(first) == "none" and energy_card(first) == "unknown"
        assert ("energy, carbon and inference figures being computed; reload in a minute"
                in first)
        assert "energy, carbon and inferences being computed" in first  # the month line
        client.get(url)  # its refreshes run after this response, in-process
        third = client.get(url).content.decode()
    assert kpis_state(third) == "current" and energy_card(third) == "24.00 kWh"
    assert "energy, carbon and inference figures" not in third


def test_new_rows_show_the_last_figures_labelled_until_the_refresh(
        client, users, team, slow_kpis, django_capture_on_commit_callbacks):
    """The writer rewrites the 29th 12:00 hour to 7.2 MJ: the views after it show the last
    figures (24.00 kWh) as of 12:30 without computing, then the refresh's 23 + 2 = 25.00 kWh."""
    from dashboards import headline, tasks
    from greenops.kpis import rollup
    from greenops.kpis.models import KpiRollup

    make_host(team, "node-a", gpus=1)
    day_rows(team, NOW.replace(minute=0))
    client.force_login(users["owner"])
    url = f"/teams/{team.slug}/?range=day"
    with mock.patch("django.utils.timezone.now", return_value=NOW):
        assert tasks.refresh_team_kpis(team.id, "day") is True
        assert energy_card(client.get(url).content.decode()) == "24.00 kWh"
    KpiRollup.objects.filter(bucket=dt.datetime(2026, 11, 29, 12, tzinfo=dt.UTC)).update(
        gpu_energy_j=7.2e6)
    with django_capture_on_commit_callbacks(execute=True):
        rollup._changed(team.id)  # what the writer does once its rows are committed
    later = NOW + dt.timedelta(minutes=5)
    with mock.patch("django.utils.timezone.now", return_value=later):
        with (mock.patch.object(headline, "kpi_figures", side_effect=AssertionError("in view")),
              mock.patch("greenops.queueing.run_after_response")):
            stale = client.get(url).content.decode()
        assert kpis_state(stale) == "stale" and energy_card(stale) == "24.00 kWh"
        assert "energy, carbon and inference figures as of 12:30 UTC, refreshing" in stale
        client.get(url)  # its refresh runs after the response
        fresh = client.get(url).content.decode()
    assert kpis_state(fresh) == "current" and energy_card(fresh) == "25.00 kWh"


def test_a_small_team_computes_its_figures_in_the_request(client, users, team):
    """At most KPI_INLINE_HOSTS hosts and nothing kept: computed in the request (quick), as
    before -- the first view has them."""
    make_host(team, "node-a", gpus=1)
    day_rows(team, NOW.replace(minute=0))
    client.force_login(users["owner"])
    with mock.patch("django.utils.timezone.now", return_value=NOW), \
            mock.patch("greenops.queueing.run_after_response"):
        html = client.get(f"/teams/{team.slug}/?range=day").content.decode()
    assert kpis_state(html) == "current" and energy_card(html) == "24.00 kWh"


def test_a_burst_of_views_queues_one_kpi_refresh(team):
    from dashboards import refresh, tasks

    with mock.patch.object(refresh.queueing, "publish_after_response") as publish:
        assert tasks.request_kpis_refresh(team, "day") is True
        assert tasks.request_kpis_refresh(team, "hour") is False  # "hour" shows the day's
        assert tasks.request_kpis_refresh(team, "week") is True
    assert publish.call_count == 2
    cache.delete_many([tasks.kpis_refresh_mark(team.id, k) for k in ("day", "week")])


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_cold_kpi_cards_answer_at_once_and_the_worker_fills_them(client, users, team,
                                                                 slow_kpis):
    """With a real worker: a cold page answers under 1 s saying the KPI figures are being
    computed; the worker's refresh_team_kpis fills them; the page then shows 24 x 1 kWh."""
    from dashboards import headline

    make_host(team, "node-a", gpus=1)
    top = timezone.now().replace(minute=0, second=0, microsecond=0)
    day_rows(team, top)
    client.force_login(users["owner"])
    url = f"/teams/{team.slug}/?range=day"
    with celery_worker("kpis") as (_queue, output):
        client.get(url)  # template compile, first connections
        _forget(team)  # the Redis restart
        t0 = time.perf_counter()
        cold = client.get(url).content.decode()
        elapsed = time.perf_counter() - t0
        assert kpis_state(cold) == "none" and energy_card(cold) == "unknown"
        assert elapsed < 1.0, elapsed
        wait_for(lambda: cache.get(headline.kpis_latest_key(team, "day")) is not None,
                 timeout=60)
        warm = client.get(url).content.decode()
    assert b"Traceback" not in output[0], output[0].decode(errors="replace")
    assert kpis_state(warm) == "current" and energy_card(warm) == "24.00 kWh"
