"""The energy chart of a large fleet: the hosts using the most energy over the range one by one,
the others as one series (greenops.telemetry.fleet.top_hosts), so what the page builds and sends
does not grow with hosts -- and each bucket's stacked height, and the range's total, stay the
fleet's kWh.
"""

from __future__ import annotations

import datetime as dt
import importlib.machinery
import importlib.util
import json
import re

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.support import ROOT
from tests.support.factories import make_host

NOW = dt.datetime(2026, 11, 30, 12, 30, tzinfo=dt.UTC)
BUCKET = dt.datetime(2026, 11, 30, 10, tzinfo=dt.UTC)


def test_top_hosts_and_the_rest_summed():
    from greenops.telemetry.fleet import TOP_HOSTS, top_hosts

    assert TOP_HOSTS == 8
    # 10 hosts over 2 buckets: h<i> used i kWh then 1 kWh. h0 (1 kWh) and h1 (2 kWh) use the
    # least: the other 8 by name, then 2 others with [0 + 1, 1 + 1] = [1, 2].
    names = [f"h{i}" for i in range(10)]
    kwh = np.array([[float(i), 1.0] for i in range(10)])
    by_host, other = top_hosts(names, kwh)
    assert list(by_host) == [f"h{i}" for i in range(2, 10)]
    assert by_host["h7"] == [7.0, 1.0]
    assert other == {"hosts": 2, "kwh": [1.0, 2.0]}
    # Stacked heights: bucket 0 is 0 + 1 + ... + 9 = 45, bucket 1 is 10 x 1.
    assert [sum(v[b] for v in by_host.values()) + other["kwh"][b] for b in (0, 1)] == [45, 10]
    # 9 hosts fit one by one: no "other" series.
    by_host, other = top_hosts(names[:9], kwh[:9])
    assert list(by_host) == names[:9] and other is None


def test_a_tie_at_the_cut_goes_by_name():
    from greenops.telemetry.fleet import top_hosts

    # 10 hosts of 5 kWh each: all tied, so the first 8 names ("a".."h") are drawn, "i" and "j"
    # are the 2 others (5 + 5 = 10 kWh).
    names = list("jihgfedcba")
    by_host, other = top_hosts(names, np.full((10, 1), 5.0))
    assert list(by_host) == list("abcdefgh")
    assert other == {"hosts": 2, "kwh": [10.0]}


@pytest.fixture
def ten_hosts(team):
    """node-0..node-9 with 2 GPUs each (20 GPUs: the fleet view), each GPU of node-h using
    360,000 x (h + 1) J in the hour BUCKET: node-h's hour is 2 x 0.1 x (h + 1) = 0.2 (h + 1)
    kWh, the fleet's 0.2 x (1 + ... + 10) = 11 kWh."""
    from greenops.telemetry.models import GpuHour

    hosts = [make_host(team, f"node-{h}", gpus=2)[0] for h in range(10)]
    GpuHour.objects.bulk_create([
        GpuHour(gpu=g, bucket=BUCKET, samples=60, util_sum=60 * 50.0, util_n=60,
                power_sum_w=60 * 100.0, power_n=60, energy_j=360_000.0 * (h + 1))
        for h, host in enumerate(hosts) for g in host.gpus.all()])
    return hosts


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_fleet_series_draws_eight_hosts_and_the_rest_with_the_fleet_total(team, ten_hosts):
    from greenops.telemetry.fleet import fleet_series, team_fleet_series
    from greenops.telemetry.queries import team_gpus

    for fs in (fleet_series(team_gpus(team), "week", NOW), team_fleet_series(team, "week", NOW)):
        k = fs["t"].index(BUCKET.isoformat())
        # node-2..node-9 drawn; node-0 (0.2 kWh) and node-1 (0.4 kWh) are the 2 others: 0.6.
        assert list(fs["energy_kwh_by_host"]) == [f"node-{h}" for h in range(2, 10)]
        assert fs["energy_kwh_by_host"]["node-9"][k] == pytest.approx(2.0, abs=1e-12)
        assert fs["energy_kwh_other_hosts"]["hosts"] == 2
        assert fs["energy_kwh_other_hosts"]["kwh"][k] == pytest.approx(0.6, abs=1e-12)
        stacked = (sum(v[k] for v in fs["energy_kwh_by_host"].values())
                   + fs["energy_kwh_other_hosts"]["kwh"][k])
        assert stacked == pytest.approx(11.0, abs=1e-12)
        assert fs["totals"]["energy_kwh"] == pytest.approx(11.0, abs=1e-12)


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_the_page_says_what_the_last_bar_is(client, users, team, ten_hosts):
    from django.utils import timezone

    from greenops.telemetry.models import GpuHour

    # The fixture's hour moved to the hour before now, so the page's week holds it.
    GpuHour.objects.filter(gpu__host__team=team).update(
        bucket=timezone.now().replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=1))
    client.force_login(users["member"])
    html = client.get(f"/teams/{team.slug}/?range=week").content.decode()
    fig = json.loads(re.search(r'<script id="fig-energy" type="application/json">(.*?)</script>',
                               html, re.S).group(1))
    assert [t["name"] for t in fig["data"]] == [f"node-{h}" for h in range(2, 10)] + [
        "2 other hosts"]
    assert "the 8 hosts using the most, then 2 others as one bar" in fig["layout"]["title"]["text"]


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_the_pages_queries_do_not_grow_with_hosts(client, users, team):
    """3 hosts of 8 GPUs, then 6: the team page at a range runs as many queries."""
    from django.utils import timezone

    from greenops.telemetry.models import GpuMinute

    minute = timezone.now().replace(second=0, microsecond=0)
    client.force_login(users["member"])

    def add_hosts(first: int) -> None:
        for h in range(first, first + 3):
            host, _ = make_host(team, f"node-{h}", gpus=8)
            GpuMinute.objects.bulk_create([
                GpuMinute(gpu=g, bucket=minute - dt.timedelta(minutes=m), samples=60,
                          util_sum=60 * 50.0, util_n=60, power_sum_w=60 * 100.0, power_n=60,
                          energy_j=6000.0) for g in host.gpus.all() for m in (0, 1)])

    def queries(key: str) -> int:
        client.get(f"/teams/{team.slug}/?range={key}")  # the first queues what the cache lacks
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(f"/teams/{team.slug}/?range={key}").status_code == 200
        return len(ctx.captured_queries)

    add_hosts(0)
    before = {key: queries(key) for key in ("hour", "day")}
    add_hosts(3)
    assert {key: queries(key) for key in ("hour", "day")} == before


def test_bench_compares_the_pages_cut_with_the_same_cut_of_every_raw_host():
    """bench/dashboard's compare: the page's 8 hosts and "other hosts" series against the raw
    side's every host, cut by the same rule; a wrong sum in the rest is reported."""
    loader = importlib.machinery.SourceFileLoader("bench_dashboard",
                                                  str(ROOT / "bench" / "dashboard"))
    bench = importlib.util.module_from_spec(importlib.util.spec_from_loader("bench_dashboard",
                                                                            loader))
    loader.exec_module(bench)
    raw_hosts = {f"h{i}": [float(i), 1.0] for i in range(10)}
    page = {"util_mean_pct": [], "util_p10_pct": [], "util_p90_pct": [], "power_w": [],
            "gpus_reporting": [], "totals": {},
            "energy_kwh_by_host": {f"h{i}": [float(i), 1.0] for i in range(2, 10)},
            "energy_kwh_other_hosts": {"hosts": 2, "kwh": [1.0, 2.0]}}
    raw = {**page, "energy_kwh_by_host": raw_hosts}
    del raw["energy_kwh_other_hosts"]
    assert bench.compare(page, raw) == []
    page["energy_kwh_other_hosts"] = {"hosts": 2, "kwh": [1.0, 2.5]}
    assert bench.compare(page, raw) == ["energy of the other hosts[1]: page 2.5 raw 2.0"]
    # A host in the page's 8 that is not among the raw side's 8 largest.
    page["energy_kwh_other_hosts"] = {"hosts": 2, "kwh": [1.0, 2.0]}
    raw["energy_kwh_by_host"] = {**raw_hosts, "h0": [20.0, 1.0]}
    assert "the hosts using the most energy differ" in bench.compare(page, raw)
