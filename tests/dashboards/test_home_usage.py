"""The team home's cost figures read month_cost's summed path (month_cost.team_usage), each
window once per refresh, and never the per-hour path (accounting.collect): its windows are whole
hours at the standard idle threshold."""

from __future__ import annotations

import datetime as dt
from unittest import mock

from tests.support.factories import make_host

NOW = dt.datetime(2026, 11, 30, 12, 30, tzinfo=dt.UTC)


def test_the_month_ranges_refresh_sums_each_window_once_and_never_per_hour(client, users, team):
    """Range "month": the view computes nothing; the refresh it queues (in-process after the
    response) sums every range's windows once each: the last 30 days (the cards and the
    recommendations both ask) and the 30 before, the month to date Nov 1 to 12:00, and the
    other ranges' windows."""
    from dashboards import views
    from greenops import windows
    from greenops.costs import accounting, month_cost

    make_host(team, "node-0", gpus=2)
    client.force_login(users["owner"])
    real = month_cost.team_usage
    in_view = []
    real_render = views.render

    def render(*args, **kwargs):
        in_view.append(spy.call_count)
        return real_render(*args, **kwargs)

    with (
        mock.patch("django.utils.timezone.now", return_value=NOW),
        mock.patch.object(views, "render", render),
        mock.patch.object(month_cost, "team_usage", side_effect=real) as spy,
        mock.patch.object(accounting, "collect", side_effect=AssertionError("per hour")),
    ):
        response = client.get(f"/teams/{team.slug}/?range=month")
    assert response.status_code == 200
    assert in_view == [0]
    starts = [windows.lookback(c.args[1], c.args[2]).start for c in spy.call_args_list]
    assert len(starts) == len(set(starts)), starts
    assert starts.count(windows.lookback(30, NOW).start) == 1
    assert windows.lookback(30, NOW - dt.timedelta(days=30)).start in starts
    month_start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    assert month_start in starts  # the month to date


def test_the_first_hour_of_a_month_in_the_teams_time_zone_is_billed_nothing_yet(
    client, users, team
):
    """23:30 UTC on 30 November is 00:30 on 1 December in Paris: December so far holds no whole
    hour, so its cost is $0 of nothing -- the page answered 500 ("a Window must end after it
    starts") for the first hour of every month."""
    team.time_zone = "Europe/Paris"
    team.save()
    make_host(team, "node-0", gpus=2)
    client.force_login(users["owner"])
    now = dt.datetime(2026, 11, 30, 23, 30, tzinfo=dt.UTC)
    with mock.patch("django.utils.timezone.now", return_value=now):
        response = client.get(f"/teams/{team.slug}/")
    assert response.status_code == 200
    assert b"December" in response.content
