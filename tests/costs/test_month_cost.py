"""month_cost sums per host and span what host_costs, gpu_usage and measure_gpus read per hour
(issue 35 item 4): on hand-built data the two paths give the same figures, and the summed one
reads the same number of queries for 2 hosts as for 6.

The data cover every edge that cuts a span: a price change at 20:30 (inside an hour), a switch
to a reserved instance at 10:15, a host removed at 40:20 that kept reporting after, a host
enrolled at 05:40, site factors changing at 30:00, a team discount from 36:00, an on-premises
host billed for electricity x PUE, a host with no catalog price, a host idle in every minute
(a stop recommendation, judged hour by hour), a GPU with no hour rows (minute rows only:
its idle minutes come from the minute rollups), and a GPU whose hour rows hold a utilisation
but counted no minutes (rollups kept before minutes were counted: its minutes come from the
minute rollups of those hours too).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from greenops.carbon.accounting import SINCE_EVER
from greenops.carbon.models import FactorsPeriod
from greenops.costs import month_cost
from greenops.costs.accounting import collect, gpu_usage, host_costs
from greenops.costs.models import HostCostConfig
from greenops.costs.overrides import OverrideKind, PriceOverride
from greenops.costs.team_recommendations import BASIS_DAYS, team_recommendations
from greenops.kpis.measure import measure_gpus
from greenops.telemetry.models import Gpu, GpuHour, GpuMinute, Host, HostEnergyHour
from tests.support.costs import enrolled, only_prices, set_price, switch_to_reserved
from tests.support.factories import make_host

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
END = T0 + dt.timedelta(hours=48)


def h(hours: float) -> dt.datetime:
    return T0 + dt.timedelta(hours=hours)


def hour_rows(gpu: Gpu, hours, util: float = 50.0, idle_every: int = 0) -> None:
    """One hour rollup per hour, its minute counts as the ingest statement keeps them: 60
    minutes with a utilisation, of which (hour % idle_every) x 5 idle (all 60 when
    idle_every is 1)."""
    GpuHour.objects.bulk_create([
        GpuHour(gpu=gpu, bucket=h(i), samples=60, util_sum=util * 60, util_n=60,
                energy_j=(200 + 10 * (i % 5)) * 3600, mem_used_max_mib=20_000,
                util_minutes=60,
                idle_minutes=60 if idle_every == 1 else (i % idle_every) * 5 if idle_every else 0)
        for i in hours])


def minute_rows(gpu: Gpu, hour: int, n: int, util: float) -> None:
    GpuMinute.objects.bulk_create([
        GpuMinute(gpu=gpu, bucket=h(hour) + dt.timedelta(minutes=m), samples=1,
                  util_sum=util, util_n=1, energy_j=12_000.0, mem_used_max_mib=20_000)
        for m in range(n)])


@pytest.fixture
def fleet(team):
    only_prices(on_demand="32.00", reserved="20.00")
    # The on-demand rate changes inside hour 20 (20:30): hour 20 keeps 32, hour 21 pays 40.
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "40.00", as_of=h(20.5))
    PriceOverride.objects.create(team=team, kind=OverrideKind.DISCOUNT, discount_pct="10",
                                 source="contract", valid_from=h(36))
    a, _ = make_host(team, "a-on-demand", gpus=2)
    b, _ = make_host(team, "b-reserved-removed", gpus=1)
    c, _ = make_host(team, "c-enrolled-late", gpus=1)
    d, _ = make_host(team, "d-on-prem", gpus=1)
    e, _ = make_host(team, "e-unpriced", gpus=1)
    f, _ = make_host(team, "f-idle", gpus=1)
    for host in (a, b, d, e, f):
        enrolled(host, T0 - dt.timedelta(days=30))
    enrolled(c, h(5 + 40 / 60))
    a0, a1 = a.gpus.order_by("index")
    hour_rows(a0, [i for i in range(48) if not 30 <= i < 34], idle_every=7)
    # a1 has no hour row: 20 minutes in hour 5 (all idle) and 30 in hour 25 (busy).
    minute_rows(a1, 5, 20, 2.0)
    minute_rows(a1, 25, 30, 60.0)
    HostEnergyHour.objects.bulk_create([
        HostEnergyHour(host=a, bucket=h(i), cpu_energy_j=90_000.0, ram_energy_j=10_000.0,
                       cpu_method="rapl", ram_method="constant", samples=60)
        for i in range(48)])
    hour_rows(b.gpus.get(), [*range(10), *range(12, 44)], idle_every=3)
    month_cost.cached_prices().terms(b)  # priced once before the switch: its terms recorded
    switch_to_reserved(b, h(10.25))
    enrolled(b, T0 - dt.timedelta(days=30), removed=h(40 + 1 / 3))
    hour_rows(c.gpus.get(), range(6, 48), util=2.0, idle_every=2)
    FactorsPeriod.objects.create(host=c, valid_from=SINCE_EVER, valid_to=h(30), pue=1.2,
                                 pue_source="site A", intensity_g_per_kwh=300.0,
                                 intensity_source="grid A")
    FactorsPeriod.objects.create(host=c, valid_from=h(30), pue=1.5, pue_source="site B",
                                 intensity_g_per_kwh=420.0, intensity_source="grid B")
    d.purchase_option, d.provider = "on_prem", "on_prem"
    d.save()
    HostCostConfig.objects.create(host=d, hardware_usd=Decimal("250000"), amortisation_months=36,
                                  electricity_usd_per_kwh=Decimal("0.20"))
    hour_rows(d.gpus.get(), range(48), idle_every=4)
    e.instance_type = "no-such.type"
    e.save()
    hour_rows(e.gpus.get(), range(0, 48, 2))
    hour_rows(f.gpus.get(), range(48), util=1.0, idle_every=1)  # idle every minute: stop it
    g, _ = make_host(team, "g-old-rollups", gpus=1)
    enrolled(g, T0 - dt.timedelta(days=30))
    hour_rows(g.gpus.get(), range(48), util=30.0)
    # Hours 6-9 were rolled up before minutes were counted: a utilisation, no minute counts.
    GpuHour.objects.filter(gpu__host=g, bucket__gte=h(6), bucket__lt=h(10)).update(
        util_minutes=0, idle_minutes=0)
    minute_rows(g.gpus.get(), 7, 40, 1.0)  # 40 idle minutes
    minute_rows(g.gpus.get(), 8, 25, 80.0)  # 25 busy minutes
    return list(Host.objects.filter(team=team).prefetch_related("gpus").order_by("name"))


def per_hour(hosts: list[Host], start: dt.datetime, end: dt.datetime):
    """Today's per-hour path, as month_figures composed it before month_cost."""
    costs = {c.host.id: c for c in host_costs(hosts, gpu_usage(hosts, start, end), start, end,
                                              now=end)}
    totals = {}
    for host in hosts:
        gpus = list(host.gpus.all())
        for g in gpus:
            g.host = host
        totals[host.id] = measure_gpus(gpus, start, end)
    return costs, totals


COST_FIELDS = ("running_hours", "billed_hours", "energy_kwh", "gpu_count", "cost_usd",
               "idle_gpu_hours", "idle_cost_usd", "electricity_usd")
TOTAL_FIELDS = ("gpu_energy_j", "cpu_ram_energy_j", "util_sum", "util_n", "gpu_minutes",
                "facility_energy_j", "co2e_g")


def same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and a == pytest.approx(b, rel=1e-9, abs=1e-9)
    return a == b


@pytest.mark.parametrize("window", [(T0, END), (h(3), h(45)), (h(20), h(22))])
def test_spans_give_every_figure_of_the_per_hour_path(fleet, window):
    start, end = window
    assert month_cost.fast_path(start, end)
    old_costs, old_totals = per_hour(fleet, start, end)
    new = month_cost.host_months(fleet, start, end, now=end)
    for host in fleet:
        old, m = old_costs[host.id], new[host.id]
        for f in COST_FIELDS:
            assert same(getattr(m.cost, f), getattr(old, f)), (host.name, f)
        assert m.cost.price == old.price and m.cost.problem == old.problem, host.name
        t = old_totals[host.id]
        for f in TOTAL_FIELDS:
            assert same(getattr(m, f), getattr(t, f)), (host.name, f)
        assert (m.simulated, m.cpu_ram_method, m.pue_source, m.intensity_source) == (
            t.simulated, t.cpu_ram_method, t.pue_source, t.intensity_source), host.name
    a, b, c, d, e, _, g = (new[x.id] for x in fleet)
    if window == (T0, END):
        # The figures that would expose a wrong span, worked out by hand:
        # a: ran 44 hours; hours 0-20 at $32 (21 h), hour 21-35 at $40 (11 h, 30-33 silent),
        #    36-47 at $40 less 10 % = $36 (12 h): 672 + 440 + 432 = $1,544.
        assert a.cost.running_hours == 44 and a.cost.cost_usd == pytest.approx(1544.0)
        # a's idle minutes: a0's counts (hour % 7) x 5 over its 44 hours, plus a1's 20 idle
        # minutes in hour 5 (from minute rows: it has no hour row).
        idle = sum((i % 7) * 5 for i in range(48) if not 30 <= i < 34) + 20
        assert a.cost.idle_gpu_hours == pytest.approx(idle / 60)
        # b: on-demand until 10:15, reserved after ($20, less 10 % = $18 from hour 36);
        # removed at 40:20. Billed: hours 0-9 ran at $32 (10 h); hour 10 did not run: 45 min
        # under the reservation (0.75 h x $20); hour 11 owned, not run: $20; hours 12-35
        # (24 h x $20); 36-40 owned (5 h x $18); 41-43 ran after its removal (3 h x $18):
        # 320 + 15 + 20 + 480 + 90 + 54 = $979.
        assert b.cost.cost_usd == pytest.approx(979.0)
        assert b.cost.billed_hours == round(10 + 0.75 + 1 + 24 + 5 + 3)
        # c: enrolled 05:40, ran 6-47; $32 to hour 20, $40 21-35, $36 36-47:
        # 15 x 32 + 15 x 40 + 12 x 36 = 480 + 600 + 432 = $1,512. Its carbon uses 1.2/300
        # before hour 30 and 1.5/420 from it.
        assert c.cost.cost_usd == pytest.approx(1512.0)
        assert c.pue_source == "1.2 (site A); 1.5 (site B)"
        # e: no catalog price: no cost, named.
        assert e.cost.cost_usd is None and e.cost.problem.code == "unknown_instance_type"
        assert d.cost.electricity_usd > 0
        # g: its counted hours had no idle minute; hours 6-9 counted none, so their minute
        # rows count: 40 idle in hour 7 (1 % < 5 %), 25 busy in hour 8.
        assert g.cost.idle_gpu_hours == pytest.approx(40 / 60)


def test_a_window_cutting_an_hour_keeps_the_per_hour_path(fleet):
    assert not month_cost.fast_path(h(0.5), END)
    assert not month_cost.fast_path(T0, END, idle_threshold_pct=10.0)


def queries_for(team, n: int) -> int:
    hosts = list(Host.objects.filter(team=team).prefetch_related("gpus").order_by("name"))[:n]
    assert len(hosts) == n
    with CaptureQueriesContext(connection) as q:
        month_cost.host_months(hosts, T0, END, now=END)
    return len(q.captured_queries)


def test_queries_do_not_grow_with_hosts(team):
    only_prices(on_demand="32.00")
    for i in range(6):
        host, _ = make_host(team, f"node-{i}", gpus=2)
        enrolled(host, T0 - dt.timedelta(days=30))
        for g in host.gpus.all():
            hour_rows(g, range(0, 48, 3), idle_every=5)
    month_cost.host_months(list(Host.objects.filter(team=team).prefetch_related("gpus")), T0,
                           END)  # first pricing records terms and factors, once per host
    assert queries_for(team, 2) == queries_for(team, 6)


def test_minute_fallback_reads_the_hours_once_not_once_per_gpu(fleet):
    """The fallback for minutes no hour counted is planned without a correlated subquery. The
    two it had (an OR of EXISTS) were hashed when the GPU table had statistics, but re-run per
    GPU over every GPU-hour of the window when it had none yet (autovacuum off, or a new
    install): 11 s for 2,000 GPUs over 7 days and 40 s for 4,000, against 0.25 and 0.45 s for
    this statement on the same data in the same run (0.43-0.71 s before with statistics)."""
    sql = month_cost.MINUTES_SQL.format(**month_cost.TABLES, by="m.gpu_id")
    params = {"gpus": [g.id for host in fleet for g in host.gpus.all()], "start": T0,
              "end": END, "idle_pct": 5.0}
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "SubPlan" not in plan, plan


def test_gpu_summaries_sum_what_gpu_usage_reads_hour_by_hour(fleet):
    old = gpu_usage(fleet, T0, END)
    new = month_cost.gpu_summaries(fleet, T0, END, latest_hours=48)
    assert set(new) == set(old)  # a1 (minute rows only) included
    for gpu_id, u in old.items():
        s = new[gpu_id]
        assert (s.hour_count(), s.first_hour(), s.mem_max_mib(), s.idle_minutes()) == (
            u.hour_count(), u.first_hour(), u.mem_max_mib(), u.idle_minutes())
        assert s.energy_kwh == pytest.approx(u.energy_kwh)
        assert s.idle_share() == pytest.approx(u.idle_share())
        assert s.latest() == u  # the whole 48-hour window is "latest" here


def test_recommendations_from_summaries_equal_those_from_collect(fleet, team):
    now = END + dt.timedelta(minutes=30)
    # The per-hour path, as the default was before every surface read month_cost.
    old = team_recommendations(team, 2, now, usage=collect(team, 2, now),
                               basis=collect(team, BASIS_DAYS, now))
    assert team_recommendations(team, 2, now) == old  # the default is the summed path
    usage = month_cost.team_usage(team, 2, now)
    assert isinstance(usage, month_cost.TeamSummary)
    new = team_recommendations(team, 2, now, usage=usage,
                               basis=month_cost.team_usage(team, BASIS_DAYS, now))
    assert new == old
    # Something of each kind that reads the GPUs' sums or their latest hours was found.
    assert {"no_commitment", "rightsize", "stop_idle"} <= {
        r["kind"] for r in old["recommendations"]}
    assert usage.hourly_counts(fleet[:1]) == collect(team, 2, now).hourly_counts(fleet[:1])
