"""No page waits on a cold cache (issue 35 item 5): the team home never computes its cost
figures in the request. Without a snapshot it says they are being computed; after an edit or
in a new hour it shows the last ones with their time ("as of 12:30 UTC, refreshing"); either
way it queues dashboards.tasks.refresh_team_home once, which fills them for the next view."""

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


def _forget(team) -> None:
    """What a Redis restart loses for this team: its snapshots, its last one, the refresh mark
    (the cache is a shared Redis database: no clear())."""
    from dashboards import headline, tasks

    created = team.created_at.timestamp()
    base = timezone.now().replace(minute=0, second=0, microsecond=0)
    keys = [
        headline.snapshot_key(team.id, t + k * HOUR, None, created)
        for t in (NOW.replace(minute=0), base)
        for k in (-1, 0, 1)
    ]
    cache.delete_many([*keys, headline.latest_key(team.id, created), tasks.refresh_mark(team.id)])


@pytest.fixture(autouse=True)
def _cold(team):
    _forget(team)
    yield
    _forget(team)


def priced_team(team, usd_per_hour: float, end: dt.datetime, hours: int = 5):
    """1 GPU at a fixed team price override, reporting `hours` whole hours before `end`: the
    day's cost card is hours x price."""
    from greenops.costs.overrides import PriceOverride
    from greenops.telemetry.models import GpuHour

    host, _ = make_host(team, "node-a", gpus=1)
    override = PriceOverride.objects.create(
        team=team,
        kind="hourly",
        instance_type=host.instance_type,
        usd_per_hour=usd_per_hour,
        source="contract",
        valid_from=end - dt.timedelta(days=400),
    )
    GpuHour.objects.bulk_create(
        [
            GpuHour(
                gpu=host.gpus.get(),
                bucket=end - (i + 1) * HOUR,
                samples=60,
                util_sum=3000.0,
                util_n=60,
                energy_j=1000.0,
            )
            for i in range(hours)
        ]
    )
    return override


def cost_card(html: str) -> str:
    return card(html, "cost_usd")


def state(html: str) -> str:
    return figures_state(html, "costs")


def test_cold_cache_says_being_computed_and_the_refresh_fills_it(client, users, team):
    """Embedded default (tasks in-process): the view computes nothing (collect raises inside
    it), the refresh runs once the response is finished, the next view shows 5 h x $2 =
    $10.00 from it."""
    from greenops.costs import accounting

    priced_team(team, 2.0, NOW.replace(minute=0))
    client.force_login(users["owner"])
    with mock.patch("django.utils.timezone.now", return_value=NOW):
        with (
            mock.patch.object(accounting, "collect", side_effect=AssertionError("in view")),
            mock.patch("greenops.queueing.run_after_response"),
        ):  # the refresh held back
            first = client.get(f"/teams/{team.slug}/?range=day").content.decode()
        assert state(first) == "none"
        assert cost_card(first) == "unknown"
        assert "being computed" in first and "data-recommendations-pending" in first
        assert "cost unknown (being computed)" in first
        # The refresh, queued once, runs after the response (in-process): the next view has it.
        second = client.get(f"/teams/{team.slug}/?range=day").content.decode()
        third = client.get(f"/teams/{team.slug}/?range=day").content.decode()
    assert state(second) == "none"  # the first view's refresh was held back; this one ran it
    assert state(third) == "current" and cost_card(third) == "$10.00"
    assert "Cost figures and recommendations as of 12:30 UTC." in third


def test_an_edit_shows_the_last_figures_labelled_until_the_refresh(client, users, team):
    """$2/h -> $3/h: the view after the edit shows the last figures ($10.00) as of their time,
    "refreshing", without computing; the refresh then gives 5 h x $3 = $15.00."""
    from dashboards import tasks
    from greenops.costs import accounting

    override = priced_team(team, 2.0, NOW.replace(minute=0))
    client.force_login(users["owner"])
    with mock.patch("django.utils.timezone.now", return_value=NOW):
        assert tasks.refresh_team_home(team.id) is True
        override.usd_per_hour = 3.0
        override.save()
        later = NOW + dt.timedelta(minutes=5)
    with mock.patch("django.utils.timezone.now", return_value=later):
        with (
            mock.patch.object(accounting, "collect", side_effect=AssertionError("in view")),
            mock.patch("greenops.queueing.run_after_response"),
        ):
            stale = client.get(f"/teams/{team.slug}/?range=day").content.decode()
        assert state(stale) == "stale" and cost_card(stale) == "$10.00"
        assert "as of 12:30 UTC, refreshing." in stale
        client.get(f"/teams/{team.slug}/?range=day")  # its refresh runs after the response
        fresh = client.get(f"/teams/{team.slug}/?range=day").content.decode()
    assert state(fresh) == "current" and cost_card(fresh) == "$15.00"
    assert "as of 12:35 UTC." in fresh


def test_a_burst_of_views_queues_one_refresh(rf, team, users):
    from dashboards import refresh, tasks

    with mock.patch.object(refresh.queueing, "publish_after_response") as publish:
        assert tasks.request_refresh(team) is True
        assert tasks.request_refresh(team) is False
        assert tasks.request_refresh(team) is False
    assert publish.call_count == 1
    cache.delete(tasks.refresh_mark(team.id))


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_cold_page_answers_at_once_and_the_worker_fills_it(client, users, team):
    """With a real worker: a cold page (as after a Redis restart) answers under 1 s saying the
    figures are being computed; the worker's refresh fills them; the page then shows 5 h x
    $2 = $10.00 from them."""
    from dashboards import headline

    top = timezone.now().replace(minute=0, second=0, microsecond=0)
    priced_team(team, 2.0, top)
    client.force_login(users["owner"])
    with celery_worker("home") as (_queue, output):
        client.get(f"/teams/{team.slug}/?range=day")  # template compile, first connections
        _forget(team)  # the Redis restart
        t0 = time.perf_counter()
        cold = client.get(f"/teams/{team.slug}/?range=day").content.decode()
        elapsed = time.perf_counter() - t0
        assert state(cold) == "none" and cost_card(cold) == "unknown"
        assert elapsed < 1.0, elapsed
        created = team.created_at.timestamp()
        wait_for(lambda: cache.get(headline.latest_key(team.id, created)) is not None, timeout=60)
        warm = client.get(f"/teams/{team.slug}/?range=day").content.decode()
    assert b"Traceback" not in output[0], output[0].decode(errors="replace")
    assert state(warm) == "current" and cost_card(warm) == "$10.00"
