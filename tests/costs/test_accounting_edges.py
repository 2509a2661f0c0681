"""Edges of greenops/costs/accounting.py that its mutation run found untested (issue 16).

Every figure is worked out by hand in the test's docstring or comments; each test was checked
to fail on the mutant it names (tests/mutation/SURVIVORS.md, cost-accounting section).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.utils import timezone

from greenops.costs.accounting import (
    GpuUsage,
    cached_prices,
    collect,
    cost_of,
    existing_hours,
    gpu_usage,
    host_costs,
    idle_cost,
    in_force,
    is_committed,
    running_hours,
    team_costs,
)
from greenops.costs.catalog import HourlyPrice, PriceProblem
from greenops.costs.models import HostTermsPeriod, Price, PricePeriod
from greenops.costs.overrides import OverrideKind, PriceOverride
from greenops.energy import HourEnergy, ItEnergy, it_energy
from greenops.telemetry.models import GpuHour, GpuMinute, Host
from greenops.windows import floor_hour
from greenops.workloads.models import TrainingJob, Workload
from tests.support.costs import (
    END,
    NOW,
    add_hours,
    enrolled,
    only_prices,
    set_price,
    switch_to_reserved,
)
from tests.support.factories import make_host

J_PER_KWH = 3_600_000
HOUR_ = dt.timedelta(hours=1)

T0 = dt.datetime(2026, 11, 1, 0, 0, tzinfo=dt.UTC)


def h(hours: float) -> dt.datetime:
    return T0 + dt.timedelta(hours=hours)


def test_owned_hours_run_from_the_enrolment_hour_to_the_removal():
    """Window 00:00-06:00; enrolled 01:30 (its started hour 01:00 counts whole), removed at
    04:00 sharp: owned hours 01:00, 02:00, 03:00 -- not 04:00, in which it no longer existed."""
    host = Host(name="h", created_at=h(1.5), removed_at=h(4))
    assert existing_hours(host, h(0), h(6)) == {h(1), h(2), h(3)}
    # Removed one minute into 04:00: it existed in part of that hour, which counts.
    host.removed_at = h(4) + dt.timedelta(minutes=1)
    assert existing_hours(host, h(0), h(6)) == {h(1), h(2), h(3), h(4)}


DEC, JAN, FEB = (dt.datetime(2025, 12, 1, tzinfo=dt.UTC), dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
                 dt.datetime(2026, 2, 1, tzinfo=dt.UTC))


def offer_history() -> list[PricePeriod]:
    """An offer at $40/h in December, $30/h in January, $20/h from February on (still)."""
    return [PricePeriod(usd_per_hour=Decimal("40"), valid_from=DEC, valid_to=JAN, source="dec"),
            PricePeriod(usd_per_hour=Decimal("30"), valid_from=JAN, valid_to=FEB, source="jan"),
            PricePeriod(usd_per_hour=Decimal("20"), valid_from=FEB, valid_to=None, source="feb")]


def current() -> HourlyPrice:
    return HourlyPrice(usd_per_hour=20.0, option="on_demand", source="catalog", as_of=FEB,
                       stale=False, price=Price(usd_per_hour=Decimal("20")))


def test_the_price_in_force_is_the_period_holding_the_hours_start():
    mid_jan = JAN + dt.timedelta(days=14, hours=3)
    found = in_force(current(), offer_history(), mid_jan)
    # January's period, not December's (also started before the hour) nor the current one.
    assert found.usd_per_hour == 30.0 and isinstance(found.usd_per_hour, float)
    assert found.as_of == JAN and found.price is None
    assert found.source == "jan (in force 2026-01-01 to 2026-02-01)"
    assert (found.option, found.stale) == ("on_demand", False)
    # Its first hour is in it; the hour its successor starts is not (periods are [from, to)).
    assert in_force(current(), offer_history(), JAN).usd_per_hour == 30.0
    last_dec = JAN - dt.timedelta(hours=1)
    assert in_force(current(), offer_history(), last_dec).usd_per_hour == 40.0
    # In the open period the current price is returned as it is (its Price row kept).
    now = current()
    assert in_force(now, offer_history(), FEB) is now


def test_before_the_first_period_the_earliest_recorded_price_applies_labelled_so():
    found = in_force(current(), offer_history(), DEC - dt.timedelta(days=3))
    assert found.usd_per_hour == 40.0 and found.as_of == DEC
    assert found.source == "dec (earliest recorded price, in force 2025-12-01 to 2026-01-01)"


def test_one_recorded_period_or_no_price_passes_the_answer_through():
    now = current()
    assert in_force(now, offer_history()[:1], JAN) is now
    # Two are a history already: January's hours keep January's price.
    assert in_force(now, offer_history()[1:], JAN).usd_per_hour == 30.0
    problem = PriceProblem("missing_price", "h: no price")
    assert in_force(problem, offer_history(), JAN + dt.timedelta(days=3)) is problem


def test_the_labelled_source_is_cut_to_the_300_characters_a_source_holds():
    periods = offer_history()
    periods[1].source = "s" * 290
    found = in_force(current(), periods, JAN)
    assert found.source == ("s" * 290 + " (in force 2026-01-01 to 2026-02-01)")[:300]
    assert len(found.source) == 300


# cost_of, fed by hand: the set's energy per (host, hour) and a price and site factors that
# say exactly what each hour costs, so every figure below is plain arithmetic.


def old_host(team, name: str = "gpu-node-1", **fields) -> Host:
    """A 2-GPU host enrolled long before T0 (created_at is auto_now_add: set it after)."""
    host, _ = make_host(team, name)
    Host.objects.filter(pk=host.pk).update(created_at=T0 - dt.timedelta(days=90), **fields)
    host.refresh_from_db()
    return host


def energy_of(start, end, hosts, hours=None, linked=1) -> ItEnergy:
    """One GPU (`linked`) of each 2-GPU host; hours: {(host, bucket): IT energy in kWh}."""
    return ItEnergy(start, end, hosts={h.id: h for h in hosts},
                    linked_gpus={h.id: linked for h in hosts},
                    host_gpu_count={h.id: 2 for h in hosts},
                    hours={(host.id, b): HourEnergy(gpu_energy_j=kwh * 0.8 * J_PER_KWH,
                                                    cpu_ram_energy_j=kwh * 0.2 * J_PER_KWH)
                           for (host, b), kwh in (hours or {}).items()})


def pue_by_hour(pues: dict):
    return lambda host, hour: SimpleNamespace(pue=pues[hour])


def test_owned_hardware_bills_each_owned_part_hour_plus_electricity_at_each_hours_pue(team):
    """On premises, $10/h hardware, $0.20/kWh; the set is 1 of the host's 2 GPUs (share 0.5).
    Window 00:15-02:00: owned hours 00:00 (0.75 of it inside) and 01:00 (whole), both billed
    though the host ran only in 00:00 (a minute at 00:30).
      hardware    = (0.75 + 1) h x $10 x 0.5                 = $8.75
      electricity = 1 kWh x PUE 1.5 x 0.20 + 2 kWh x 1.25 x 0.20 = 0.30 + 0.50 = $0.80
    The 01:00 hour's price is stale: the source names both, the stale one labelled."""
    host = old_host(team, provider="on_prem", purchase_option="on_prem")
    GpuMinute.objects.create(gpu=host.gpus.get(index=0), bucket=h(0.5), samples=1,
                             util_sum=50.0, util_n=1, energy_j=1.0)
    prices = {h(0): HourlyPrice(10.0, "on_prem", "hw-a", None, False, 0.20),
              h(1): HourlyPrice(10.0, "on_prem", "hw-b", None, True, 0.20)}
    energy = energy_of(h(0.25), h(2), [host], {(host, h(0)): 1.0, (host, h(1)): 2.0})
    cost = cost_of(energy, lambda x, hour: prices[hour] if x == host else None,
                   pue_by_hour({h(0): 1.5, h(1): 1.25}))
    line = cost.hosts[host.id]
    assert line.share == 0.5
    assert line.running_hours == pytest.approx(0.75)  # ran in 00:00, 0.75 of it in the window
    assert line.billed_hours == pytest.approx(1.75)
    assert line.hardware_usd == pytest.approx(8.75)
    assert line.electricity_usd == pytest.approx(0.80)
    assert line.price is prices[h(1)] and line.problem is None
    assert cost.cost_usd == pytest.approx(9.55) and cost.problems == []
    assert cost.source == "hw-a; hw-b (stale)"


def test_a_host_with_no_price_makes_the_whole_cost_unknown_and_is_named(team):
    """Two on-demand hosts ran (energy in 00:00); the price answers nothing (None) for both:
    no total, each named once, in name order, with the generic missing-price problem."""
    b = old_host(team, "b-node")
    a = old_host(team, "a-node")
    energy = energy_of(h(0), h(1), [b, a], {(b, h(0)): 1.0, (a, h(0)): 1.0})
    cost = cost_of(energy, lambda host, hour: None, pue_by_hour({h(0): 1.0}))
    assert cost.cost_usd is None
    assert cost.source == "no price for a-node, b-node"
    assert cost.problems == ["b-node: no price", "a-node: no price"]  # host id order
    assert cost.hosts[a.id].problem == PriceProblem("missing_price", "a-node: no price")
    assert cost.hosts[a.id].cost_usd is None


def test_an_uncommitted_host_that_neither_ran_nor_used_energy_needs_no_price(team):
    """On demand, in the window but idle and without energy: nothing billed, the price never
    asked, so a missing price is no problem and the cost is a known $0."""
    host = old_host(team)
    asked = []
    energy = energy_of(h(0), h(2), [host])
    cost = cost_of(energy, lambda host, hour: asked.append(hour), pue_by_hour({}))
    assert asked == [] and cost.cost_usd == 0.0 and cost.problems == []
    assert cost.hosts[host.id].billed_hours == 0.0


METHOD = ("host-hours the host ran (any GPU reporting) x the price of its purchase option in "
          "force in each hour; commitments and owned hardware billed for every hour of the "
          "window the host existed; on premises plus electricity (GPU + CPU/RAM energy x PUE x "
          "$/kWh); the KPI pages use the same model")


def test_the_costs_page_figures_of_one_day_whole(team):
    """Lookback 1 day ending 06:00 (END). p4d on demand at $10/h (2 GPUs): GPU 0 at 80 % and
    GPU 1 at 2 % in the last 2 hours. Cost 2 h x $10 = $20; GPU 1's 120 idle minutes are 2 idle
    GPU-hours at $10 / 2 GPUs = $10; energy 2 x 0.3 + 2 x 0.06 = 0.72 kWh. The workload holds
    GPU 0: 2 GPU-hours, 2 h x $10 x 1/2 = $10. Training jobs: those that ran in the window."""
    host, _ = make_host(team)
    enrolled(host, END - dt.timedelta(days=90))
    g0, g1 = host.gpus.order_by("index")
    add_hours(g0, 2, 80.0)
    add_hours(g1, 2, 2.0, kwh_per_hour=0.06)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "10")
    w = Workload.objects.create(team=team, name="trainer", kind="training")
    w.gpus.add(g0)
    start = END - dt.timedelta(days=1)

    def job(name, started, stopped):
        return TrainingJob.objects.create(team=team, workload=w, name=name, started_at=started,
                                          stopped_at=stopped, gpu_hours=1.5, cost_usd=7.5,
                                          cost_source="jobs")

    stopped = job("stopped", END - dt.timedelta(hours=3), END - dt.timedelta(hours=1))
    job("before the window", start - dt.timedelta(hours=5), start - dt.timedelta(seconds=1))
    edge = job("stopped at the window's start", start - dt.timedelta(hours=5), start)
    running = job("running", END - dt.timedelta(hours=2), None)
    job("after the window", END, None)

    out = team_costs(collect(team, 1, NOW))
    [row] = out["hosts"]
    assert row.pop("energy_kwh") == pytest.approx(0.72)
    assert row == {
        "host": "gpu-node-1", "host_id": host.id, "instance_type": "p4d.24xlarge",
        "region": "us-east-1", "purchase_option": "on_demand", "running_hours": 2,
        "billed_hours": 2, "cost_usd": 20.0, "electricity_usd": 0.0, "idle_gpu_hours": 2.0,
        "idle_cost_usd": 10.0, "usd_per_hour": 10.0, "price_source": "test",
        "price_as_of": (NOW - dt.timedelta(days=1)).isoformat(), "price_stale": False,
        "problem": None, "problem_code": None}
    jobs = sorted(out.pop("training_jobs"), key=lambda j: j["id"])
    assert jobs == [
        {"id": j.id, "name": j.name, "workload": "trainer", "running": j.stopped_at is None,
         "started_at": j.started_at.isoformat(), "gpu_hours": 1.5, "cost_usd": 7.5,
         "cost_source": "jobs"} for j in (stopped, edge, running)]
    del out["hosts"]
    assert out == {
        "team": team.slug, "lookback_days": 1, "start": start.isoformat(),
        "end": END.isoformat(), "window_text": "24 hours to 30 Nov 2026 06:00 UTC",
        "method": METHOD, "total_cost_usd": 20.0,
        "priced_cost_usd": 20.0, "idle_cost_usd": 10.0, "idle_threshold_pct": 5.0,
        "unpriced_hosts": 0, "stale_prices": False, "problems": [],
        "workloads": [{"slug": w.slug, "name": "trainer", "kind": "training", "gpu_hours": 2,
                       "cost_usd": 10.0}]}


def test_a_host_without_a_price_leaves_the_priced_sum_and_names_the_problem(team):
    """Host a (p4d, $10/h, price 100 days old: stale) ran 2 hours, GPU 1 idle: $20 and $10
    idle. Host b (an instance type the catalog does not know) ran too: no total, the priced
    sum and idle cost are a's alone, b's row says why, and stale prices are flagged."""
    a, _ = make_host(team, "a-node")
    b, _ = make_host(team, "b-node")
    for host in (a, b):
        enrolled(host, END - dt.timedelta(days=90))
        g0, g1 = host.gpus.order_by("index")
        add_hours(g0, 2, 80.0)
        add_hours(g1, 2, 2.0, kwh_per_hour=0.06)
    Host.objects.filter(pk=b.pk).update(instance_type="p9.mega")
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "10",
              as_of=NOW - dt.timedelta(days=100))
    out = team_costs(collect(team, 1, NOW))
    assert out["total_cost_usd"] is None and out["unpriced_hosts"] == 1
    assert out["priced_cost_usd"] == 20.0 and out["idle_cost_usd"] == 10.0
    assert out["stale_prices"] is True
    row_a, row_b = sorted(out["hosts"], key=lambda r: r["host"])
    assert row_a["price_stale"] is True and row_a["problem"] is None
    message = "'p9.mega' is not in the aws price catalog"
    assert len(out["problems"]) == 1 and message in out["problems"][0]
    assert row_b["problem"] == out["problems"][0]
    assert row_b["problem_code"] == "unknown_instance_type"
    assert (row_b["cost_usd"], row_b["idle_cost_usd"], row_b["usd_per_hour"],
            row_b["price_source"], row_b["price_as_of"], row_b["price_stale"]) == (
        None, None, None, None, None, None)
    assert row_b["idle_gpu_hours"] == 2.0 and row_b["running_hours"] == 2


def test_the_job_list_stops_at_100(team):
    host, _ = make_host(team)
    w = Workload.objects.create(team=team, name="sweep", kind="training")
    TrainingJob.objects.bulk_create([
        TrainingJob(team=team, workload=w, name=f"trial {i}",
                    started_at=END - dt.timedelta(hours=1, minutes=i)) for i in range(101)])
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "10")
    assert len(team_costs(collect(team, 1, NOW))["training_jobs"]) == 100


def test_idle_share_is_idle_minutes_over_reported_minutes_of_the_asked_hours():
    """00:00: 60 minutes reported, 30 idle; 01:00: 60 reported, none idle."""
    usage = GpuUsage(1, 1, minutes={h(0): (60, 30), h(1): (60, 0)})
    assert usage.idle_share() == 0.25  # 30 / 120
    assert usage.idle_share([h(0)]) == 0.5  # 30 / 60
    assert usage.idle_share([h(0), h(5)]) == 0.5  # an hour without minutes adds nothing
    assert usage.idle_share([h(5)]) is None  # nothing reported: unknown, not 0
    assert GpuUsage(1, 1, minutes={h(0): (0, 0)}).idle_share() is None


def hour_row(gpu, bucket, util_sum, util_n, counted=0, idle=0, samples=60):
    GpuHour.objects.create(gpu=gpu, bucket=bucket, samples=samples, util_sum=util_sum,
                           util_n=util_n, energy_j=1000.0 * (gpu.index + 1),
                           mem_used_max_mib=500.0, util_minutes=counted, idle_minutes=idle)


def minute_rows(gpu, hour, utils, util_n=1):
    GpuMinute.objects.bulk_create([
        GpuMinute(gpu=gpu, bucket=hour + dt.timedelta(minutes=m), samples=1,
                  util_sum=u * util_n, util_n=util_n, energy_j=1.0)
        for m, u in enumerate(utils)])


@pytest.fixture
def four_gpus(team):
    """Hours 00:00-03:00 (h0..h2 inside the window, h3 after it).
    g0: hour rows h0 (60 minutes counted by ingest, 45 idle; mean util 30 %) and h1 (a
        utilisation but no minute counted: written by something else) and h3; minute rows:
        10 at 8 % in h0, and in h1 20 at 1 % and 40 at 50 %.
    g1: no hour row; minute rows in h2: 10 at 1 %, 20 at 50 %, one without a utilisation
        (util_n 0), and 30 at 1 % in h3.
    g2: hour row h0 counted (60, none idle); hour row h2 with no samples (ignored) though it
        counts 60 idle minutes; 60 minute rows at 0 % in h1.
    g3: hour row h0 with no utilisation reported (util_n 0) and no minute counted."""
    host, _ = make_host(team, gpus=4)
    g0, g1, g2, g3 = host.gpus.order_by("index")
    hour_row(g0, h(0), 30.0 * 60, 60, counted=60, idle=45)
    hour_row(g0, h(1), 20.0 * 60, 60)
    hour_row(g0, h(3), 50.0 * 60, 60, counted=60, idle=60)
    minute_rows(g0, h(0), [8.0] * 10)
    minute_rows(g0, h(1), [1.0] * 20 + [50.0] * 40)
    minute_rows(g1, h(2), [1.0] * 10 + [50.0] * 20)
    GpuMinute.objects.create(gpu=g1, bucket=h(2) + dt.timedelta(minutes=45), samples=1,
                             util_sum=0.0, util_n=0, energy_j=1.0)
    minute_rows(g1, h(3), [1.0] * 30)
    hour_row(g2, h(0), 40.0 * 60, 60, counted=60, idle=0)
    hour_row(g2, h(2), 0.0, 0, counted=60, idle=60, samples=0)
    minute_rows(g2, h(1), [0.0] * 60)
    hour_row(g3, h(0), 0.0, 0)
    return host, (g0, g1, g2, g3)


def test_gpu_usage_reads_the_hours_counts_and_minutes_only_where_no_hour_counted(four_gpus):
    host, (g0, g1, g2, g3) = four_gpus
    usage = gpu_usage([host], h(0), h(3))
    assert set(usage) == {g0.id, g1.id, g2.id, g3.id}
    assert usage[g0.id].host_id == host.id
    assert usage[g0.id].hours == {h(0): (30.0, 1000.0, 500.0), h(1): (20.0, 1000.0, 500.0)}
    # h0 from the hour's counts (its 10 minute rows not counted again); h1 from its minutes.
    assert usage[g0.id].minutes == {h(0): (60, 45), h(1): (60, 20)}
    assert usage[g1.id].hours == {} and usage[g1.id].minutes == {h(2): (30, 10)}
    # g2's hours all counted: its h1 minute rows are not read (the hour rollups are the
    # record; minute rows without an hour row come from something other than ingest).
    assert usage[g2.id].hours == {h(0): (40.0, 3000.0, 500.0)}
    assert usage[g2.id].minutes == {h(0): (60, 0)}
    assert usage[g3.id].hours == {h(0): (None, 4000.0, 500.0)} and usage[g3.id].minutes == {}
    assert usage[g0.id].idle_minutes() == 65 and usage[g0.id].idle_hours() == 65 / 60


def test_gpu_usage_at_another_threshold_or_in_part_hours_counts_minutes(four_gpus):
    host, (g0, g1, g2, g3) = four_gpus
    # At 10 %: every GPU's minutes from minute rows (the hour counts are at 5 %).
    usage = gpu_usage([host], h(0), h(3), idle_threshold_pct=10.0)
    assert usage[g0.id].minutes == {h(0): (10, 10), h(1): (60, 20)}
    assert usage[g1.id].minutes == {h(2): (30, 10)}
    assert usage[g2.id].minutes == {h(1): (60, 60)}
    assert usage[g3.id].minutes == {}
    # Window 00:30-03:00 at 5 %: minute rows again; g0's h0 minutes (00:00-00:09) are before it.
    usage = gpu_usage([host], h(0.5), h(3))
    assert usage[g0.id].minutes == {h(1): (60, 20)}
    assert usage[g0.id].hours == {h(1): (20.0, 1000.0, 500.0)}
    assert usage[g2.id].minutes == {h(1): (60, 60)} and g3.id not in usage


def test_gpu_usage_of_gpus_whose_hours_all_counted_reads_no_minutes(team):
    host, _ = make_host(team, gpus=1)
    [g] = host.gpus.all()
    hour_row(g, h(0), 40.0 * 60, 60, counted=60, idle=6)
    minute_rows(g, h(1), [0.0] * 60)  # no hour row: not the ingest's, not read
    assert gpu_usage([host], h(0), h(2))[g.id].minutes == {h(0): (60, 6)}


def test_running_hours_are_the_hours_with_a_sample_inside_the_window(team):
    """Host x: hour rows 00:00 (1 sample), 01:00 (none: not running), 02:00 and 23:00 the day
    before (outside 00:00-02:00). Minute rows for the part window 00:30-02:00: 00:10 (before
    it), 00:40 (1 sample), 01:05 (none), 02:10 (after it). Host y ran only at 01:00."""
    x, _ = make_host(team, "x")
    y, _ = make_host(team, "y")
    gx, gy = x.gpus.get(index=0), y.gpus.get(index=1)
    for b, n in ((h(0), 1), (h(1), 0), (h(2), 5), (h(-1), 5)):
        GpuHour.objects.create(gpu=gx, bucket=b, samples=n)
    GpuHour.objects.create(gpu=gy, bucket=h(1), samples=3)
    for b, n in ((h(1 / 6), 1), (h(2 / 3), 1), (h(13 / 12), 0), (h(13 / 6), 1)):
        GpuMinute.objects.create(gpu=gx, bucket=b, samples=n)
    GpuMinute.objects.create(gpu=gy, bucket=h(1.5), samples=2)
    assert running_hours([x.id, y.id], h(0), h(2)) == {x.id: {h(0)}, y.id: {h(1)}}
    assert running_hours([x.id], h(0), h(2)) == {x.id: {h(0)}}
    assert running_hours([x.id, y.id], h(0.5), h(2)) == {x.id: {h(0)}, y.id: {h(1)}}


def test_idle_cost_prices_each_hour_with_idle_minutes_at_its_own_price(team):
    """2 GPUs. 00:00: no idle minute (its price is never asked: there is none); 01:00: 20 + 10
    idle minutes at $10/h: 0.5 h x $10 / 2 GPUs = $2.50; 02:00: 60 idle at $20/h: 1 h x $20 / 2
    = $10. Total $12.50. An hour with idle minutes and no price makes it unknown."""
    host, _ = make_host(team)
    rates = {h(1): 10.0, h(2): 20.0}

    def price(host, hour):
        return HourlyPrice(rates[hour], "on_demand", "t", None, False) if hour in rates else None

    g0 = GpuUsage(1, host.id, minutes={h(0): (60, 0), h(1): (60, 20), h(2): (60, 60)})
    g1 = GpuUsage(2, host.id, minutes={h(1): (60, 10)})
    assert idle_cost(host, [g0, g1], price) == pytest.approx(12.5)
    g1.minutes[h(3)] = (60, 1)
    assert idle_cost(host, [g0, g1], price) is None
    host.gpus.all().delete()
    assert idle_cost(host, [g0], price) is None  # no GPUs: no per-GPU price


def test_a_host_without_gpus_is_listed_at_nothing_and_a_known_zero(team):
    host, _ = make_host(team, gpus=0)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "10")
    [row] = host_costs([host], {}, h(0), h(2), now=NOW)
    assert (row.running_hours, row.billed_hours, row.cost_usd, row.electricity_usd) == (
        0, 0, 0.0, 0.0)
    assert (row.gpu_count, row.energy_kwh, row.idle_gpu_hours) == (0, 0.0, 0.0)
    assert row.problem is None and row.idle_cost_usd is None and row.price.usd_per_hour == 10


def test_the_rows_price_is_judged_stale_at_the_asked_now_not_the_clock(team):
    """A price recorded yesterday, looked at 200 days from now: stale then (over 90 days)."""
    later = floor_hour(timezone.now()) + dt.timedelta(days=200, minutes=30)
    host, _ = make_host(team)
    add_hours(host.gpus.get(index=0), 2, 80.0, end=floor_hour(later))
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "10",
              as_of=timezone.now() - dt.timedelta(days=1))
    out = team_costs(collect(team, 1, later))
    assert out["hosts"][0]["price_stale"] is True and out["stale_prices"] is True
    assert out["hosts"][0]["cost_usd"] == 20.0  # 2 h x $10


def test_an_hour_the_host_ran_before_its_enrolment_is_billed_without_the_sets_energy(team):
    """Enrolled at 01:00, but its GPU 1 reported at 00:00 (a spool replayed after a re-enrol).
    The set is GPU 0 alone (share 0.5), which reported nothing. On demand, $10/h:
      00:00 ran (not owned, no energy of the set): 1 h x $10 x 0.5 = $5
      01:00 owned, not run, on demand: not billed."""
    host, _ = make_host(team)
    Host.objects.filter(pk=host.pk).update(created_at=h(1))
    host.refresh_from_db()
    GpuHour.objects.create(gpu=host.gpus.get(index=1), bucket=h(0), samples=60)
    hourly = HourlyPrice(10.0, "on_demand", "t", None, False)
    cost = cost_of(energy_of(h(0), h(2), [host]), lambda x, hour: hourly, pue_by_hour({}))
    line = cost.hosts[host.id]
    assert (line.running_hours, line.billed_hours, line.hardware_usd) == (1.0, 1.0, 5.0)
    assert cost.cost_usd == 5.0


# Host terms that change inside an hour (HostTermsPeriod), priced by the pages' own Prices.
H = dt.datetime(2026, 10, 20, 13, 0, tzinfo=dt.UTC)


def whole_host(host, start, end) -> ItEnergy:
    return it_energy(list(host.gpus.select_related("host")), start, end)


def test_a_part_hour_not_owed_under_the_old_terms_does_not_stop_the_next_part(team):
    """On demand ($30/h) until 13:15, then reserved ($18/h); the host did not run 13:00-14:00.
    13:00-13:15 on demand and idle: nothing. 13:15-14:00 reserved, owned: 0.75 h x $18 = $13.50
    (under today's terms for the whole hour it would be $18, or $7.50 more at $30)."""
    only_prices(on_demand="30.00", reserved="18.00")
    host, _ = make_host(team)
    enrolled(host, dt.datetime(2026, 9, 15, tzinfo=dt.UTC))
    HostTermsPeriod.ensure(host)
    switch_to_reserved(host, H + dt.timedelta(minutes=15))
    cost = cost_of(whole_host(host, H, H + HOUR_), cached_prices())
    line = cost.hosts[host.id]
    assert line.billed_hours == 0.75 and cost.cost_usd == pytest.approx(13.5)


def test_a_part_hour_without_a_price_leaves_the_next_part_billed(team):
    """No on-demand price; on demand until 13:15, then reserved at $18/h; the host ran at
    13:00. 13:00-13:15: ran, no price (the host's cost unknown). 13:15-14:00: billed,
    0.75 h x $18 = $13.50 -- still counted in its billed hours and hardware."""
    only_prices(reserved="18.00")
    host, _ = make_host(team)
    enrolled(host, dt.datetime(2026, 9, 15, tzinfo=dt.UTC))
    GpuHour.objects.create(gpu=host.gpus.get(index=0), bucket=H, samples=60, energy_j=1000.0)
    HostTermsPeriod.ensure(host)
    switch_to_reserved(host, H + dt.timedelta(minutes=15))
    cost = cost_of(whole_host(host, H, H + HOUR_), cached_prices())
    line = cost.hosts[host.id]
    assert line.problem.code == "missing_price" and cost.cost_usd is None
    assert line.billed_hours == 0.75 and line.hardware_usd == pytest.approx(13.5)


def test_a_window_starting_inside_an_hour_pays_the_price_in_force_at_the_hours_start(team):
    """On demand $30/h, refreshed to $20/h at 13:20. Window 13:30-14:00 (a job's, say); the
    host ran at 13:40. The hour is priced as of its start: 0.5 h x $30 = $15 (not $10)."""
    only_prices(on_demand="30.00")
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "20.00",
              as_of=H + dt.timedelta(minutes=20))
    host, _ = make_host(team)
    enrolled(host, dt.datetime(2026, 9, 15, tzinfo=dt.UTC))
    GpuMinute.objects.create(gpu=host.gpus.get(index=0), bucket=H + dt.timedelta(minutes=40),
                             samples=1, energy_j=1.0)
    cost = cost_of(whole_host(host, H + dt.timedelta(minutes=30), H + HOUR_), cached_prices())
    assert cost.hosts[host.id].billed_hours == 0.5 and cost.cost_usd == pytest.approx(15.0)


# Survivors of the first whole-module measurement (tests/mutation/session.py, issue 16).


def test_a_host_not_yet_saved_is_owned_for_the_whole_window():
    """A Host built in memory has no enrolment time (created_at None): every hour of the window
    is owned -- not a comparison of None with a datetime."""
    assert existing_hours(Host(name="h"), h(0.5), h(3)) == {h(0), h(1), h(2)}


def test_a_busy_host_has_a_known_zero_idle_cost(team):
    """Both GPUs at 80 % for 2 hours, $10/h: $20, no idle minute, so the idle cost is $0 -- in
    the host's row and in the team's total."""
    host, _ = make_host(team)
    enrolled(host, END - dt.timedelta(days=90))
    for gpu in host.gpus.all():
        add_hours(gpu, 2, 80.0)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "10")
    out = team_costs(collect(team, 1, NOW))
    assert out["hosts"][0]["idle_cost_usd"] == 0.0 and out["hosts"][0]["cost_usd"] == 20.0
    assert out["idle_cost_usd"] == 0.0 and out["total_cost_usd"] == 20.0


def test_collect_counts_idle_minutes_at_the_asked_threshold(team):
    """GPU 0 at 30 % for 2 hours: busy at the standard 5 %, idle at a threshold of 50 % --
    120 idle minutes, 2 idle GPU-hours, $10 of idle cost at $10/h / 2 GPUs."""
    host, _ = make_host(team)
    enrolled(host, END - dt.timedelta(days=90))
    g0 = host.gpus.get(index=0)
    add_hours(g0, 2, 30.0)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "10")
    assert collect(team, 1, NOW).usage[g0.id].idle_minutes() == 0
    tu = collect(team, 1, NOW, idle_threshold_pct=50.0)
    assert tu.usage[g0.id].idle_minutes() == 120
    [row] = tu.rows
    assert row.idle_gpu_hours == 2.0 and row.idle_cost_usd == 10.0 and row.cost_usd == 20.0
    out = team_costs(tu, idle_threshold_pct=50.0)
    assert out["idle_threshold_pct"] == 50.0 and out["idle_cost_usd"] == 10.0


def test_the_prices_of_a_cost_are_judged_stale_at_the_asked_now(team):
    """A price recorded yesterday; the host ran 2 hours, 200 days from now. Priced as of then,
    the price is over 90 days old: its source is labelled stale. Priced as of today it is not."""
    later = floor_hour(timezone.now()) + dt.timedelta(days=200)
    host, _ = make_host(team)
    add_hours(host.gpus.get(index=0), 2, 80.0, end=later)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "10",
              as_of=timezone.now() - dt.timedelta(days=1))
    window = (host, later - 2 * HOUR_, later)
    stale = cost_of(whole_host(*window), cached_prices(later))
    assert stale.source == "test (stale)" and stale.cost_usd == 20.0
    assert cost_of(whole_host(*window), cached_prices()).source == "test"


def test_gpu_usage_reads_only_the_asked_hosts_gpus_and_hours_of_one_sample(team):
    """Host a: GPU 0 has an hour row of a single sample at 00:00 (one minute counted, busy at
    40 %): read. GPU 1 has only minute rows, 3 at 1 % in 01:00: its usage is its own (its id).
    Host b, not asked, has an hour row in the window: not read."""
    a, _ = make_host(team, "a")
    b, _ = make_host(team, "b")
    ga0, ga1 = a.gpus.order_by("index")
    hour_row(ga0, h(0), 40.0, 1, counted=1, idle=0, samples=1)
    minute_rows(ga1, h(1), [1.0] * 3)
    hour_row(b.gpus.get(index=0), h(0), 40.0 * 60, 60, counted=60)
    usage = gpu_usage([a], h(0), h(2))
    assert set(usage) == {ga0.id, ga1.id}
    assert (usage[ga0.id].gpu_id, usage[ga0.id].host_id) == (ga0.id, a.id)
    assert usage[ga0.id].hours == {h(0): (40.0, 1000.0, 500.0)}
    assert usage[ga0.id].minutes == {h(0): (1, 0)}
    assert (usage[ga1.id].gpu_id, usage[ga1.id].host_id) == (ga1.id, a.id)
    assert usage[ga1.id].minutes == {h(1): (3, 3)}


def test_owned_hardware_is_committed_whatever_purchase_option_it_was_given():
    """On premises is paid for every hour owned even when its purchase option says on demand;
    a cloud host is committed by its purchase option alone."""
    assert is_committed(Host(provider="on_prem", purchase_option="on_demand"))
    assert not is_committed(Host(provider="aws", purchase_option="on_demand"))
    assert is_committed(Host(provider="aws", purchase_option="savings_plan"))


def test_running_hours_of_a_part_window_are_the_asked_hosts_alone(team):
    """Window 00:30-02:00 (minute rollups): host x ran at 00:40 and at 23:50 the day before
    (outside the window: not its hour 23:00), host y at 01:30; asked for x alone, y's minute
    is not x's, nor listed."""
    x, _ = make_host(team, "x")
    y, _ = make_host(team, "y")
    GpuMinute.objects.create(gpu=x.gpus.get(index=0), bucket=h(2 / 3), samples=1)
    GpuMinute.objects.create(gpu=x.gpus.get(index=0), bucket=h(-1 / 6), samples=1)
    GpuMinute.objects.create(gpu=y.gpus.get(index=0), bucket=h(1.5), samples=1)
    assert running_hours([x.id], h(0.5), h(2)) == {x.id: {h(0)}}


def test_host_costs_bill_with_the_price_function_they_are_given(team):
    """The catalog says $10/h; the caller's price function says $7/h plus $0.25/kWh. GPU 0 ran
    00:00 using 1 kWh (GPU; no host meter, so no CPU/RAM share); window 00:00-02:00, on demand:
    1 h x $7 = $7 hardware plus 1 kWh x the default PUE 1.56 x $0.25 = $0.39 of electricity."""
    host = old_host(team)
    GpuHour.objects.create(gpu=host.gpus.get(index=0), bucket=h(0), samples=60,
                           energy_j=J_PER_KWH)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "10")
    given = HourlyPrice(7.0, "on_demand", "given", None, False, 0.25)
    [row] = host_costs([host], {}, h(0), h(2), now=NOW, price=lambda x, hour: given)
    assert row.problem is None and row.billed_hours == 1 and row.energy_kwh == 1.0
    assert row.electricity_usd == pytest.approx(0.39)
    assert row.cost_usd == pytest.approx(7.39)
    assert row.price.usd_per_hour == 10.0  # the row shows today's catalog price


def test_a_host_without_a_price_is_named_even_in_a_window_it_did_not_run_in(team):
    """Host b's instance type is not in the catalog; it did not run in the window (nothing
    asked its price there): still its row names the problem and has no cost."""
    b = old_host(team, "b-node", instance_type="p9.mega")
    [row] = host_costs([b], {}, h(0), h(2), now=NOW)
    assert row.problem is not None and row.problem.code == "unknown_instance_type"
    assert row.cost_usd is None and row.billed_hours == 0


def test_a_host_whose_window_had_an_unpriced_hour_keeps_that_problem(team):
    """Today's catalog price is fine ($10/h), but the caller's price function has none for the
    hour the host ran: the row carries that problem and no cost, not today's clean bill."""
    host = old_host(team)
    GpuHour.objects.create(gpu=host.gpus.get(index=0), bucket=h(0), samples=60)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "10")
    gone = PriceProblem("missing_price", "gpu-node-1: no price then")
    [row] = host_costs([host], {}, h(0), h(2), now=NOW, price=lambda x, hour: gone)
    assert row.problem == gone and row.cost_usd is None and row.idle_cost_usd is None
    assert row.price.usd_per_hour == 10.0


def test_a_past_hour_pays_the_team_discount_in_force_in_that_hour(team):
    """$10/h on demand; the team had a 40 % discount from 23:00 the day before until 03:00 (it
    has ended since). The host ran 00:00-01:00: that hour costs $6, labelled with the discount,
    though no discount is in force today."""
    host = old_host(team)
    GpuHour.objects.create(gpu=host.gpus.get(index=0), bucket=h(0), samples=60)
    only_prices(on_demand="10")  # from 2026-01-01: a stale price by now
    PriceOverride.objects.create(team=team, kind=OverrideKind.DISCOUNT,
                                 discount_pct=Decimal("40"), source="contract 7",
                                 valid_from=h(-1), valid_until=h(3))
    cost = cost_of(whole_host(host, h(0), h(1)), cached_prices())
    assert cost.cost_usd == pytest.approx(6.0)
    assert cost.source.startswith("test, less 40")
    assert cost.source.endswith(" % negotiated discount (contract 7) (stale)")


def test_terms_that_change_as_the_window_ends_do_not_price_it(team):
    """On demand at $30/h until 14:00 sharp, then reserved -- at no price. The host ran
    13:00-14:00; that window is on demand alone: $30 and no problem (the reserved terms, with
    their missing price, begin where it ends)."""
    only_prices(on_demand="30.00")
    host, _ = make_host(team)
    enrolled(host, dt.datetime(2026, 9, 15, tzinfo=dt.UTC))
    GpuHour.objects.create(gpu=host.gpus.get(index=0), bucket=H, samples=60, energy_j=1000.0)
    HostTermsPeriod.ensure(host)
    switch_to_reserved(host, H + HOUR_)
    cost = cost_of(whole_host(host, H, H + HOUR_), cached_prices())
    assert cost.problems == [] and cost.cost_usd == pytest.approx(30.0)
    assert cost.hosts[host.id].billed_hours == 1.0
