"""The team home collects each cost window once per view (costs.accounting.collect is the
page's expensive part at 1,000 GPUs)."""

from __future__ import annotations

import datetime as dt
from unittest import mock

from tests.support.factories import make_host

NOW = dt.datetime(2026, 11, 30, 12, 30, tzinfo=dt.UTC)


def test_month_range_collects_nothing_and_its_refresh_each_window_once(client, users, team):
    """Range "month": the view collects nothing (its cost figures come from a snapshot, or are
    "being computed"); the refresh it queues (in-process after the response) takes every
    range's windows, each collected once: the cards read the last 30 days and the 30 before,
    the month to date Nov 1 to 12:00 and the recommendations the last 30 days again, which is
    asked twice but collected once."""
    from dashboards import views
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
    ):
        response = client.get(f"/teams/{team.slug}/?range=month")
    assert response.status_code == 200
    assert in_view == [0]
    windows = [(c.args[1], c.args[2]) for c in spy.call_args_list]
    starts = [accounting.windows.lookback(d, n).start for d, n in windows]
    assert len(starts) == len(set(starts)), windows
    thirty = accounting.windows.lookback(30, NOW).start
    assert starts.count(thirty) == 1


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
