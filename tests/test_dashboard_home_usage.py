"""The team home collects each cost window once per view (costs.accounting.collect is the
page's expensive part at 1,000 GPUs)."""

from __future__ import annotations

import datetime as dt
from unittest import mock

from tests.conftest import make_host

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
