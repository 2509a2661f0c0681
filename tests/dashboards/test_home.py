"""The team home: headline figures with their change and links, the priced total beside the
hosts without a price, and charts within the point budget for one GPU or a thousand."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from tests.support.factories import make_host

NOW = dt.datetime(2026, 11, 30, 12, 30, tzinfo=dt.UTC)


def _figures(html: str) -> dict[str, dict]:
    """The Plotly specs a page embeds, by json_script id."""
    return {m.group(1): json.loads(m.group(2)) for m in re.finditer(
        r'<script id="(fig-[\w-]+)" type="application/json">(.*?)</script>', html, re.S)}


def test_display_step_fits_each_range_in_the_budget():
    from greenops.telemetry.fleet import display_step_s

    # 24 h of minute rollups in 300 points: 60 s x ceil(86,400 / 18,000) = 300 s -> 288 points.
    assert display_step_s(86400, 60, 300) == 300
    # 1 h of minutes fits as is: 60 points.
    assert display_step_s(3600, 60, 300) == 60
    # 30 days of hours: 3,600 x ceil(2,592,000 / 1,080,000) = 3 h -> 240 points.
    assert display_step_s(30 * 86400, 3600, 300) == 3 * 3600
    # 90 days of days: 90 points.
    assert display_step_s(90 * 86400, 86400, 300) == 86400


def test_fleet_mean_and_band_across_gpus(db, team):
    """21 GPUs at 0, 5, ..., 100 % in one hour: mean 50; p10 and p90 by linear interpolation
    between ranks (rank 0.1 x 20 = 2 -> 10 %, rank 18 -> 90 %); power is the fleet's sum."""
    from greenops.telemetry.fleet import fleet_series
    from greenops.telemetry.models import GpuHour
    from greenops.telemetry.queries import team_gpus

    hosts = [make_host(team, f"node-{h}", gpus=7)[0] for h in range(3)]
    bucket = dt.datetime(2026, 11, 30, 10, tzinfo=dt.UTC)
    gpus = [g for h in hosts for g in h.gpus.order_by("index")]
    GpuHour.objects.bulk_create([
        GpuHour(gpu=g, bucket=bucket, samples=60, util_sum=60 * 5.0 * i, util_n=60,
                power_sum_w=60 * 100.0, power_n=60, energy_j=360_000.0)
        for i, g in enumerate(gpus)])
    fs = fleet_series(team_gpus(team), "week", NOW)
    assert fs["grouping"] == "fleet" and fs["step_s"] == 3600
    k = fs["t"].index(bucket.isoformat())
    assert fs["util_mean_pct"][k] == pytest.approx(50.0)
    assert fs["util_p10_pct"][k] == pytest.approx(10.0)
    assert fs["util_p90_pct"][k] == pytest.approx(90.0)
    assert fs["power_w"][k] == pytest.approx(21 * 100.0)
    assert fs["gpus_reporting"][k] == 21
    # 7 GPUs x 360 kJ = 2.52 MJ = 0.7 kWh per host in that hour.
    assert fs["energy_kwh_by_host"]["node-0"][k] == pytest.approx(0.7)
    assert fs["totals"]["gpus_reporting"] == 21


def test_a_thousand_gpus_render_within_the_point_budget(client, users, team):
    """1,000 GPUs with data in every rollup: at every range, every trace on the page stays
    within the budget, and utilisation is drawn as a mean with a band, not 1,000 lines. (One
    test for the five ranges: building the fleet and its first cost snapshot is most of it.)"""
    from django.utils import timezone

    from greenops.chart_style import MAX_POINTS
    from greenops.telemetry.models import Gpu, GpuDay, GpuHour, GpuMinute, Host

    now = timezone.now()
    hosts = Host.objects.bulk_create([
        Host(team=team, name=f"node-{h:03d}", instance_type="p4d.24xlarge",
             region="us-east-1", provider="aws", token_hash=f"h{h}") for h in range(125)])
    gpus = Gpu.objects.bulk_create([Gpu(host=h, index=i, uuid=f"GPU-{h.id}-{i}")
                                    for h in hosts for i in range(8)])
    rows = dict(samples=1, util_sum=50.0, util_n=1, power_sum_w=300.0, power_n=1,
                energy_j=300.0)
    minute = now.replace(second=0, microsecond=0)
    GpuMinute.objects.bulk_create([GpuMinute(gpu=g, bucket=minute - dt.timedelta(minutes=m),
                                             **rows) for g in gpus for m in (1, 2)])
    hour = now.replace(minute=0, second=0, microsecond=0)
    GpuHour.objects.bulk_create([GpuHour(gpu=g, bucket=hour - dt.timedelta(hours=h), **rows)
                                 for g in gpus for h in (1, 30)])
    day = hour.replace(hour=0)
    GpuDay.objects.bulk_create([GpuDay(gpu=g, bucket=day - dt.timedelta(days=d), **rows)
                                for g in gpus for d in (1, 40)])
    client.force_login(users["member"])
    for range_key in ("hour", "day", "week", "month", "quarter"):
        r = client.get(f"/teams/{team.slug}/?range={range_key}")
        assert r.status_code == 200, range_key
        figs = _figures(r.content.decode())
        assert {"fig-utilisation", "fig-power", "fig-energy"} <= set(figs), range_key
        for name, fig in figs.items():
            for trace in fig["data"]:
                assert len(trace.get("x", [])) <= MAX_POINTS, (range_key, name,
                                                               trace.get("name"))
        util = figs["fig-utilisation"]["data"]
        assert len(util) == 3, range_key  # p90, p10 band, mean
        assert "1,000 GPUs" in figs["fig-utilisation"]["layout"]["title"]["text"], range_key


def _hours(host, hours: int, end: dt.datetime, util: float = 50.0) -> None:
    from greenops.telemetry.models import GpuHour

    GpuHour.objects.bulk_create([
        GpuHour(gpu=g, bucket=end - dt.timedelta(hours=h + 1), samples=60,
                util_sum=60 * util, util_n=60, power_sum_w=60 * 200.0, power_n=60,
                energy_j=720_000.0)
        for g in host.gpus.all() for h in range(hours)])


def test_home_shows_the_priced_total_beside_hosts_without_a_price(client, users, team):
    from django.utils import timezone

    priced, _ = make_host(team, "priced-node", gpus=2)  # p4d.24xlarge, us-east-1, on-demand
    unpriced, _ = make_host(team, "lab-box", gpus=3)
    unpriced.instance_type = "x9.imaginary"
    unpriced.save()
    end = timezone.now().replace(minute=0, second=0, microsecond=0)
    _hours(priced, 4, end)
    _hours(unpriced, 5, end, util=2.0)
    client.force_login(users["member"])
    # The first view finds no cost snapshot and queues its refresh (in-process, after the
    # response); the second shows it.
    client.get(f"/teams/{team.slug}/")
    html = client.get(f"/teams/{team.slug}/").content.decode()
    # Priced: 4 running hours of p4d.24xlarge on-demand in us-east-1 at $21.957642/h (the
    # 2026-11-09 snapshot) = $87.830568 -> "$87.83". Not blank because lab-box has no price.
    # The partial-sum rule: a lower bound, naming what it leaves out.
    assert 'data-kpi="cost_usd">≥ $87.83<' in html
    # lab-box: 3 GPUs x 5 hours = 15 GPU-hours without a price.
    assert "1 host unpriced (15 GPU-hours without a price)" in html
    assert "x9.imaginary" in html  # the reason, named
    # Every headline card is there and links to the page that explains it.
    for key in ("cost_usd", "energy_kwh", "facility_energy_kwh", "co2e_kg", "requests",
                "energy_per_inference_j", "cost_per_1k_inferences_usd", "gpu_util_pct",
                "idle_cost_usd"):
        assert f'data-card="{key}"' in html, key


def test_headline_change_against_the_previous_period(db, team):
    """Same fleet, twice the power this week: IT energy +100 % against the previous 7 days."""
    from dashboards import headline
    from greenops.kpis.models import KpiRollup, Period

    def day_rows(start: dt.datetime, joules: float) -> None:
        KpiRollup.objects.bulk_create([
            KpiRollup(team=team, period=Period.HOUR, bucket=start + dt.timedelta(hours=h),
                      gpu_energy_j=joules, util_sum=50.0, util_n=1, gpu_minutes=60)
            for h in range(7 * 24)])

    end = NOW.replace(minute=0)  # whole finished hours (windows.period)
    day_rows(end - dt.timedelta(days=14), 3.6e6)  # 1 kWh per hour
    day_rows(end - dt.timedelta(days=7), 7.2e6)   # 2 kWh per hour
    head = headline.headline(team, "week", NOW)
    card = next(c for c in head["cards"] if c.key == "energy_kwh")
    assert card.value == pytest.approx(7 * 24 * 2.0)  # 336 kWh
    assert card.change_pct == pytest.approx(100.0)
    assert card.href.endswith("/kpis/?range=week")


def test_small_figures_keep_significant_digits_and_large_ones_get_separators():
    from dashboards.templatetags.readable import num

    assert num(4.6e-05, 4) == "0.0000460"  # a codecarbon run's kWh, not "0.0000"
    assert num(1234567.891, 2) == "1,234,567.89"
    assert num(1582137, 0) == "1,582,137"
    assert num(None) == "–"


def test_home_shows_what_is_firing_and_only_for_its_own_team(client, users, team, other_team):
    """Firing and Recovering rules are listed with a link to the rule page; OK, Pending,
    disabled and the other team's firing rules are not."""
    from greenops.alerts.models import Rule, RuleKind, State

    def rule(t, name, state, enabled=True):
        return Rule.objects.create(team=t, name=name, kind=RuleKind.THRESHOLD,
                                   kpi="energy_per_inference_j", fire_level=2.5,
                                   state=state, enabled=enabled, last_value=3.0)

    client.force_login(users["member"])
    # No rules yet: a clear line, not an empty block.
    html = client.get(f"/teams/{team.slug}/").content.decode()
    assert "No alerts firing (0 rules)" in html

    hot = rule(team, "Energy per inference high", State.FIRING)
    cooling = rule(team, "Cooling down", State.RECOVERING)
    rule(team, "Quiet rule", State.OK)
    rule(team, "Waiting rule", State.PENDING)
    rule(team, "Switched off", State.FIRING, enabled=False)
    theirs = rule(other_team, "Speech secret rule", State.FIRING)

    html = client.get(f"/teams/{team.slug}/").content.decode()
    block = html.split('id="firing"', 1)[1].split("<h2", 1)[0]
    assert f'href="/teams/{team.slug}/alerts/{hot.id}/"' in block
    assert f'href="/teams/{team.slug}/alerts/{cooling.id}/"' in block
    assert "Energy per inference high" in block and "3.00 J" in block
    for absent in ("Quiet rule", "Waiting rule", "Switched off"):
        assert absent not in block, absent
    # 4 enabled rules of this team; 2 firing. The other team's rule appears nowhere.
    assert "2 of 4 enabled rules firing" in block
    assert "Speech secret rule" not in html and f"/alerts/{theirs.id}/" not in html

    # Nothing firing: the line counts the team's enabled rules.
    Rule.objects.filter(team=team, state__in=[State.FIRING, State.RECOVERING]).update(
        state=State.OK)
    html = client.get(f"/teams/{team.slug}/").content.decode()
    assert "No alerts firing (4 rules)" in html


def test_month_to_date_reads_day_rows_and_equals_the_sum_of_hours(db, team):
    """Late in a month the cards read each whole UTC day's row (the exact merge of its hours)
    and hour rows only at the edges and for a day not rolled up yet -- the same figures as
    every hour row of the month, from ~30 rows instead of ~700."""
    from dashboards import headline
    from greenops.kpis import queries as kq
    from greenops.kpis import rollup
    from greenops.kpis.models import KpiRollup, Period

    team.time_zone = "America/New_York"  # the month starts at 05:00 UTC, mid UTC day
    team.save()
    now = dt.datetime(2026, 11, 20, 15, 30, tzinfo=dt.UTC)
    month_start = dt.datetime(2026, 11, 1, 4, tzinfo=dt.UTC)  # midnight EDT
    hours = [month_start - dt.timedelta(hours=6) + dt.timedelta(hours=h)
             for h in range(int((now - month_start).total_seconds() // 3600) + 7)]
    KpiRollup.objects.bulk_create([
        KpiRollup(team=team, period=Period.HOUR, bucket=b, gpu_energy_j=3.6e6 + 1000 * i,
                  facility_energy_j=4.0e6 + 1000 * i, co2e_g=100.0 + i, requests=10 * i,
                  util_sum=50.0, util_n=1, gpu_minutes=60, measured_s=3600.0,
                  latency_sum_ms=5.0 * i, latency_n=i)
        for i, b in enumerate(hours)])
    day = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
    while day < dt.datetime(2026, 11, 20, tzinfo=dt.UTC):
        if day != dt.datetime(2026, 11, 9, tzinfo=dt.UTC):  # one day not rolled up yet
            rollup.rollup_day(team, day)
        day += dt.timedelta(days=1)

    end = now.replace(minute=0)  # whole finished hours: the month so far ends at 15:00
    every_hour = kq.kpis(team, None, month_start, end, Period.HOUR)
    by_day = kq.rows_by_day(team, None, month_start, end)
    assert sum(r.period == Period.DAY for r in by_day) == 17  # 2-19 Nov less the 9th
    # The 1st from 04:00 (20 h), the 9th (24 h) and the 20th to 15:00 (15 h) from hours.
    assert sum(r.period == Period.HOUR for r in by_day) == 20 + 24 + 15
    edges = {month_start, end - kq.STEP[Period.HOUR]}
    assert edges <= {r.bucket for r in by_day if r.period == Period.HOUR}
    month = headline.month_to_date(team, now)
    for key in ("energy_kwh", "co2e_kg", "requests"):
        assert month[key] == pytest.approx(every_hour[key], rel=1e-12), key
    assert month["requests"] == sum(10 * i for i, b in enumerate(hours) if month_start <= b < end)


def test_a_lone_value_between_gaps_is_drawn_as_a_point():
    from greenops.chart_style import line_mode

    # [gap, 50, gap]: Plotly would draw nothing for the 50 as a bare line.
    assert line_mode([None, 50.0, None])["mode"] == "lines+markers"
    assert line_mode([float("nan"), 50.0])["mode"] == "lines+markers"
    assert line_mode([42.0])["mode"] == "lines+markers"
    # Continuous runs (two or more neighbours) stay lines; gaps between runs are fine.
    assert line_mode([None, 50.0, 51.0, None, 40.0, 41.0]) == {"mode": "lines"}
    assert line_mode([]) == {"mode": "lines"}


def test_a_host_minutes_after_enrolling_shows_its_point_on_the_charts(client, users, team,
                                                                      host, post_batch):
    """Two minutes of samples fall in one 5-minute bucket of the last 24 hours: one value per
    GPU between gaps. The utilisation and power lines carry markers, so the charts show it."""
    import time

    from tests.support.factories import make_batch

    _, token = host
    start = (time.time() // 300 - 2) * 300 + 10  # inside one closed 5-minute bucket
    assert post_batch(token, make_batch(n_per_gpu=100, step=1.0, start=start)).status_code \
        == 202
    client.force_login(users["member"])
    figs = _figures(client.get(f"/teams/{team.slug}/?range=day").content.decode())
    for name in ("fig-utilisation", "fig-power"):
        traces = figs[name]["data"]
        assert traces and all(t["mode"] == "lines+markers" for t in traces), (name, traces)
        assert sum(v is not None for t in traces for v in t["y"]) >= 1, name
