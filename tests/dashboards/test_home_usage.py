"""The team home collects each cost window once per view (costs.accounting.collect is the
page's expensive part at 1,000 GPUs)."""

from __future__ import annotations

import datetime as dt
from unittest import mock

from tests.support.factories import make_host

NOW = dt.datetime(2026, 11, 30, 12, 30, tzinfo=dt.UTC)


def test_month_range_collects_each_window_once(client, users, team):
    """Range "month": the cost cards read the last 30 days and the 30 before, the month to date
    reads Nov 1 to 12:00, and the recommendations read the last 30 days again -- 4 asks, 3
    distinct windows, so 3 collects (it was 4)."""
    from greenops.costs import accounting

    make_host(team, "node-0", gpus=2)
    client.force_login(users["owner"])
    real = accounting.collect
    with mock.patch("django.utils.timezone.now", return_value=NOW), \
            mock.patch.object(accounting, "collect", side_effect=real) as spy:
        response = client.get(f"/teams/{team.slug}/?range=month")
    assert response.status_code == 200
    windows = [(c.args[1], c.args[2]) for c in spy.call_args_list]
    assert len(windows) == 3, windows
    assert len({accounting.windows.lookback(d, n).start for d, n in windows}) == 3


def test_the_first_hour_of_a_month_in_the_teams_time_zone_is_billed_nothing_yet(client, users,
                                                                                   team):
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
