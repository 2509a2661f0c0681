"""One figure, one answer (issue 35 item 4, continued): the Costs page, the costs API, the team
home's cost card and the alert values read month_cost's summed path, as the monthly report
does, so the same window gives the same cost on each -- and, with a host that has no price,
the same partial sum ("≥ $x") with the unpriced host named. The Costs page's query count does
not grow with hosts.

Hand-built November 2026 (team in UTC), the page's clock 1 December 00:30, so the report's
month, the 30-day lookback and the "month" range's window are all [1 Nov, 1 Dec):
  a-priced: 2 GPUs, ran hours 0-9 of 1 Nov ($32/h): $320; GPU 0 idle 30 minutes of each
            hour: 5 idle GPU-hours x $32 / 2 GPUs = $80.
  b-priced: 1 GPU, ran hours 2-5: 4 x $32 = $128; idle every minute: 4 GPU-hours x $32 = $128.
  e-unpriced: 1 GPU of an instance type the catalog does not know, ran hours 0-3.
Known cost $320 + $128 = $448; known idle cost $80 + $128 = $208; e unpriced, so neither sum
is a total.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboards import headline
from greenops.alerts import kpi_values
from greenops.costs.overrides import OverrideKind, PriceOverride
from greenops.kpis import rollup
from greenops.reports.month_figures import Month, month_figures
from greenops.telemetry.models import GpuHour
from tests.support.costs import at, enrolled, only_prices
from tests.support.factories import make_host

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
MONTH_END = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
NOW = MONTH_END + dt.timedelta(minutes=30)


def ran(gpu, hours, idle_minutes: int) -> None:
    GpuHour.objects.bulk_create([
        GpuHour(gpu=gpu, bucket=T0 + dt.timedelta(hours=i), samples=60, util_sum=40.0 * 60,
                util_n=60, energy_j=250.0 * 3600, mem_used_max_mib=20_000, util_minutes=60,
                idle_minutes=idle_minutes)
        for i in hours])


@pytest.fixture
def month(team):
    only_prices(on_demand="32.00")
    a, _ = make_host(team, "a-priced", gpus=2)
    b, _ = make_host(team, "b-priced", gpus=1)
    e, _ = make_host(team, "e-unpriced", gpus=1)
    e.instance_type = "no-such.type"
    e.save()
    for host in (a, b, e):
        enrolled(host, T0 - dt.timedelta(days=30))
    ran(a.gpus.order_by("index").first(), range(10), idle_minutes=30)
    ran(b.gpus.get(), range(2, 6), idle_minutes=60)
    ran(e.gpus.get(), range(4), idle_minutes=0)
    return {h.name: h for h in (a, b, e)}


def test_every_surface_gives_the_reports_cost(month, team, client, users):
    report = month_figures(team, Month(2026, 11), NOW)
    totals = report["totals"]
    rows = {r["host"]: r for r in report["hosts"]}
    # The report: the partial-sum rule, by hand.
    assert totals["cost_usd"] is None and totals["cost_known_usd"] == pytest.approx(448.0)
    assert "e-unpriced" in totals["unknown"]["cost_usd"]
    assert rows["a-priced"]["cost_usd"] == pytest.approx(320.0)
    assert rows["a-priced"]["idle_cost_usd"] == pytest.approx(80.0)
    assert rows["b-priced"]["idle_cost_usd"] == pytest.approx(128.0)
    known_idle = sum(r["idle_cost_usd"] for r in rows.values() if r["idle_cost_usd"] is not None)

    client.force_login(users["owner"])
    with at(NOW):
        page = client.get(f"/teams/{team.slug}/costs/?lookback=30")
        api = client.get(f"/api/v1/teams/{team.slug}/costs?lookback=30").json()
    # The Costs page and its API: same window, same partial sum, the unpriced host named.
    for costs in (page.context["costs"], api):
        assert (costs["start"], costs["end"]) == (T0.isoformat(), MONTH_END.isoformat())
        assert costs["total_cost_usd"] is None
        assert costs["priced_cost_usd"] == pytest.approx(totals["cost_known_usd"])
        assert costs["idle_cost_usd"] == pytest.approx(known_idle)
        hosts = {r["host"]: r for r in costs["hosts"]}
        assert hosts["e-unpriced"]["cost_usd"] is None and hosts["e-unpriced"]["problem"]
        for name in ("a-priced", "b-priced"):
            assert hosts[name]["cost_usd"] == pytest.approx(rows[name]["cost_usd"])
            assert hosts[name]["idle_cost_usd"] == pytest.approx(rows[name]["idle_cost_usd"])
    html = page.content.decode()
    assert "≥ $448.00" in html and "1 host unpriced" in html

    # The team home's cost card over the "month" range (the last 30 days), from its snapshot.
    usage = headline.take_snapshot(team, NOW)
    cards = {c.key: c for c in headline.headline(team, "month", NOW, usage)["cards"]}
    card = cards["cost_usd"]
    assert card.prefix == "≥ $" and card.value == pytest.approx(totals["cost_known_usd"])
    # 1 host unpriced, its 4 GPU-hours without a price.
    assert card.note == "1 host unpriced (4 GPU-hours without a price)"
    _, missing = usage.costs(team, 30, NOW)
    assert [h["name"] for h in missing.hosts] == ["e-unpriced"]
    assert cards["idle_cost_usd"].value == pytest.approx(known_idle)

    # Alert values over the same window: a host's spend is its report row; the team's idle
    # cost and spend are unknown with the report's known part as the lower bound.
    a = kpi_values.figure(kpi_values.Scope(team, host=month["a-priced"]), "cost_usd", T0,
                          MONTH_END)
    assert a.value == pytest.approx(rows["a-priced"]["cost_usd"])
    idle = kpi_values.figure(kpi_values.Scope(team), "idle_cost_usd", T0, MONTH_END)
    assert idle.value is None
    assert idle.reason.startswith("≥ $208.00 from priced hosts; 1 host unpriced: e-unpriced")
    hours = kpi_values.figure(kpi_values.Scope(team), "idle_gpu_hours", T0, MONTH_END)
    assert hours.value == pytest.approx(sum(r["idle_gpu_hours"] for r in rows.values()))
    rollup.rebuild(team, T0, T0 + dt.timedelta(hours=10))  # the team's spend is its KPI rollups'
    spend = kpi_values.figure(kpi_values.Scope(team), "cost_usd", T0, MONTH_END)
    assert spend.value is None
    assert spend.reason.startswith("≥ $448.00 from priced hosts; 1 host unpriced: e-unpriced")


def test_with_every_host_priced_every_surface_gives_the_reports_total(month, team, client,
                                                                       users):
    """e priced by a team override at $10/h: 4 hours = $40, so the total is $320 + $128 + $40
    = $488 on every surface, the team's spend alert (its KPI rollups) included."""
    PriceOverride.objects.create(team=team, kind=OverrideKind.HOURLY,
                                 instance_type="no-such.type", usd_per_hour=10, source="contract",
                                 valid_from=T0 - dt.timedelta(days=400))
    total = month_figures(team, Month(2026, 11), NOW)["totals"]["cost_usd"]
    assert total == pytest.approx(488.0)
    client.force_login(users["owner"])
    with at(NOW):
        page = client.get(f"/teams/{team.slug}/costs/?lookback=30").context["costs"]
        api = client.get(f"/api/v1/teams/{team.slug}/costs?lookback=30").json()
    assert page["total_cost_usd"] == pytest.approx(total)
    assert api["total_cost_usd"] == pytest.approx(total)
    usage = headline.take_snapshot(team, NOW)
    card = {c.key: c for c in headline.headline(team, "month", NOW, usage)["cards"]}["cost_usd"]
    assert card.value == pytest.approx(total) and card.prefix == "$"
    rollup.rebuild(team, T0, T0 + dt.timedelta(hours=10))
    spend = kpi_values.figure(kpi_values.Scope(team), "cost_usd", T0, MONTH_END)
    assert spend.value == pytest.approx(total)


def test_an_unpriced_host_that_never_ran_leaves_every_total_known(month, team, client,
                                                                    users):
    """As above, every host priced ($488), plus z-offline: an on-demand host of an unknown
    instance type enrolled all month that never reported. Unknown price x 0 hours is $0, so
    the report leaves it out and its total is $488; the Costs page, the API, the team home card
    and the spend alert give $488 as a total too, not "≥ $488" with z named as unpriced."""
    PriceOverride.objects.create(team=team, kind=OverrideKind.HOURLY,
                                 instance_type="no-such.type", usd_per_hour=10, source="contract",
                                 valid_from=T0 - dt.timedelta(days=400))
    z, _ = make_host(team, "z-offline", gpus=1)
    z.instance_type = "another-unknown.type"
    z.save()
    enrolled(z, T0 - dt.timedelta(days=30))
    report = month_figures(team, Month(2026, 11), NOW)
    assert report["totals"]["cost_usd"] == pytest.approx(488.0)
    assert "z-offline" not in {r["host"] for r in report["hosts"]}
    client.force_login(users["owner"])
    with at(NOW):
        page = client.get(f"/teams/{team.slug}/costs/?lookback=30").context["costs"]
        api = client.get(f"/api/v1/teams/{team.slug}/costs?lookback=30").json()
    for costs in (page, api):
        assert costs["total_cost_usd"] == pytest.approx(488.0)
        # Still listed with its problem: a host the team will want priced before it runs.
        z_row = {r["host"]: r for r in costs["hosts"]}["z-offline"]
        assert z_row["cost_usd"] is None and z_row["problem"]
    usage = headline.take_snapshot(team, NOW)
    card = {c.key: c for c in headline.headline(team, "month", NOW, usage)["cards"]}["cost_usd"]
    assert (card.prefix, card.value, card.note) == ("$", pytest.approx(488.0), "")
    rollup.rebuild(team, T0, T0 + dt.timedelta(hours=10))
    spend = kpi_values.figure(kpi_values.Scope(team), "cost_usd", T0, MONTH_END)
    assert spend.value == pytest.approx(488.0)


def test_the_costs_page_reads_as_many_queries_for_6_hosts_as_for_2(team, other_team, client,
                                                                    users):
    only_prices(on_demand="32.00")
    counts = []
    for t, n in ((team, 2), (other_team, 6)):
        for i in range(n):
            host, _ = make_host(t, f"{t.slug}-node-{i}", gpus=2)
            enrolled(host, T0 - dt.timedelta(days=30))
            for g in host.gpus.all():
                ran(g, range(0, 48, 3), idle_minutes=10)
        user = users["owner"] if t == team else users["outsider"]
        client.force_login(user)
        with at(NOW):  # the first view records each host's terms and factors, once
            client.get(f"/teams/{t.slug}/costs/?lookback=30")
            with CaptureQueriesContext(connection) as q:
                assert client.get(f"/teams/{t.slug}/costs/?lookback=30").status_code == 200
        counts.append(len(q.captured_queries))
    assert counts[0] == counts[1]
