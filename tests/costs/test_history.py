"""Issue 8 item 11: history stays true. An hour is costed at the price in force in that hour;
a price refresh never reprices past hours."""

from __future__ import annotations

import datetime as dt

import pytest

from greenops.costs.accounting import collect, team_costs
from greenops.costs.models import PricePeriod
from greenops.kpis import queries, rollup
from greenops.kpis.models import Period
from tests.support.costs import END, NOW, add_hours, enrolled, set_price
from tests.support.factories import make_host

DAY = dt.timedelta(days=1)
WEEK = dt.timedelta(days=7)


def kpi_cost(team, start, end) -> float | None:
    return queries.kpis(team, None, start, end, Period.HOUR)["cost_usd"]


def test_each_hour_is_costed_at_the_price_in_force_then(team):
    # p4d ran the last 48 hours. On-demand was $30/h until a refresh 24 h before END saw $20/h.
    # Cost: 24 h x $30 + 24 h x $20 = $1,200 (at today's price alone it would be 48 x 20 = $960).
    host, _ = make_host(team)
    enrolled(host, END - dt.timedelta(days=90))
    add_hours(host.gpus.get(index=0), 48, 80.0, minutes=False)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "30.00", as_of=END - 30 * DAY)
    # The KPI rollup runs while $30 is in force and stores the older day ...
    rollup.rebuild(team, END - 2 * DAY, END - DAY)
    assert kpi_cost(team, END - 2 * DAY, END - DAY) == pytest.approx(720.0)
    # ... then a refresh sees the new price.
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "20.00", as_of=END - DAY)
    periods = list(PricePeriod.objects.filter(instance_type="p4d.24xlarge", region="us-east-1",
                                              option="on_demand").order_by("valid_from"))
    # (the snapshot's own period came first; the test prices follow it)
    assert [(float(p.usd_per_hour), p.valid_to) for p in periods][-2:] == [
        (30.0, END - DAY), (20.0, None)]
    row = team_costs(collect(team, 7, NOW))
    assert row["total_cost_usd"] == pytest.approx(1200.0)
    # The Costs page shows today's price beside it.
    assert row["hosts"][0]["usd_per_hour"] == pytest.approx(20.0)
    # Recomputing every hour (an explicit rebuild) keeps the old day at the old price, and the
    # KPI page agrees with the Costs page.
    rollup.rebuild(team, END - WEEK, END)
    assert kpi_cost(team, END - 2 * DAY, END - DAY) == pytest.approx(720.0)
    assert kpi_cost(team, END - WEEK, END) == pytest.approx(1200.0)


def test_an_unchanged_refresh_opens_no_new_period(team):
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "30.00", as_of=END - 30 * DAY)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "30.00", as_of=END - DAY)
    assert PricePeriod.objects.filter(instance_type="p4d.24xlarge", region="us-east-1",
                                      option="on_demand", valid_to__isnull=True).count() == 1
    # the bundled snapshot's prices each opened their period when the catalog was loaded
    assert PricePeriod.objects.filter(instance_type="p5.48xlarge", option="on_demand").exists()
