"""Fleet rollups (greenops.telemetry.fleetroll): the team charts' closed display buckets stored by
the fill task give the same figures as the live path over the per-GPU rollups, at every range,
including after a late batch, a GPU added and a host deleted after the fill, a GPU that went
silent and one that started mid-range. Data go in through the production ingest statement.

The fleet: node-a and node-b with 8 GPUs each, node-c with 4 (GPU k of the 20 is at 5k % and
draws 100 + 10k W, one sample every 5 minutes, 300 s x that power each), node-c's GPU 2 silent
for the last 10 hours and its GPU 3 reporting only for the last 20 hours.
"""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db import connection

from tests.support.factories import make_host

NOW = dt.datetime(2026, 11, 30, 12, 30, 30, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
STEP_S = 300
RANGES = ("hour", "day", "week", "month", "quarter")

pytestmark = pytest.mark.skipif("connection.vendor != 'postgresql'")


def store(host, samples: list[tuple[int, dt.datetime, float, float]]) -> int:
    """Samples (gpu index, time, util %, power W) of one host through wire + store; each
    sample's energy is 300 s x its power."""
    from greenops.telemetry import ingest, wire
    from greenops.telemetry import store as st

    cols: dict[str, list] = {k: [] for k in (
        "ts", "gpu_index", "util_pct", "power_w", "energy_j", "energy_method", "energy_mj",
        "mem_used_mib", "temp_c", "sm_clock_mhz")}
    for i, (index, t, util, power) in enumerate(samples):
        cols["ts"].append(t.timestamp())
        cols["gpu_index"].append(index)
        cols["util_pct"].append(util)
        cols["power_w"].append(power)
        cols["energy_j"].append(STEP_S * power)
        cols["energy_method"].append("counter")
        cols["energy_mj"].append(1_000_000 + i)
        cols["mem_used_mib"].append(1024.0)
        cols["temp_c"].append(60.0)
        cols["sm_clock_mhz"].append(1410.0)
    doc = {"batch_id": str(uuid.uuid4()), "agent_version": "0.1.0",
           "sent_at": NOW.timestamp(), "source": "nvml", "samples": cols}
    batch = wire.parse_batch(doc, now_s=NOW.timestamp(), max_samples=10**6,
                             max_future_s=300, max_age_s=200 * 86400)
    return st.store_batch(batch, ingest.known_gpus(host))


def series(host, first: int, indexes, start: dt.datetime, end: dt.datetime, util=None,
           power=None) -> list:
    out = []
    t = start
    while t < end:
        for n, index in enumerate(indexes):
            k = first + n
            out.append((index, t, util if util is not None else 5.0 * k,
                        power if power is not None else 100.0 + 10 * k))
        t += dt.timedelta(seconds=STEP_S)
    return out


@pytest.fixture
def fleet(team):
    a, _ = make_host(team, "node-a", gpus=8)
    b, _ = make_host(team, "node-b", gpus=8)
    c, _ = make_host(team, "node-c", gpus=4)
    e, _ = make_host(team, "node-e", gpus=1)
    start = NOW - 30 * HOUR
    store(a, series(a, 0, range(8), start, NOW))
    store(b, series(b, 8, range(8), start, NOW))
    store(c, series(c, 16, (0, 1), start, NOW))
    store(c, series(c, 18, (2,), start, NOW - 10 * HOUR))  # went silent 10 h ago
    store(c, series(c, 19, (3,), NOW - 20 * HOUR, NOW))  # reports for the last 20 h only
    store(e, series(e, 0, (0,), NOW - 29 * HOUR, NOW - 27 * HOUR, util=100.0, power=400.0))
    return {"a": a, "b": b, "c": c, "e": e}


def live(team, key):
    from greenops.telemetry.fleet import fleet_series
    from greenops.telemetry.queries import team_gpus

    return fleet_series(team_gpus(team), key, NOW)


def page(team, key):
    from greenops.telemetry.fleet import team_fleet_series

    return team_fleet_series(team, key, NOW)


def at(fs: dict, t: dt.datetime) -> int:
    return fs["t"].index(t.isoformat())


def spy_bucket_figures(monkeypatch, record) -> list:
    """What record(*args, **kwargs) says of each bucket_figures call the page makes, in order."""
    from greenops.telemetry import fleet as fleet_module

    calls = []
    real = fleet_module.bucket_figures

    def spy(*args, **kwargs):
        calls.append(record(*args, **kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(fleet_module, "bucket_figures", spy)
    return calls


def test_hand_checked_buckets_from_stored_rollups(fleet, team):
    from greenops.telemetry import fleetroll
    from greenops.telemetry.models import FleetBucket, FleetFill

    fleetroll.fill(NOW)
    assert FleetFill.objects.filter(team=team).count() == len(fleetroll.GRIDS)
    fs = page(team, "week")
    # 12 h ago: all 20 GPUs of a, b and c at 0, 5, ..., 95 %: mean 47.5; p10 at rank 1.9 ->
    # 9.5; p90 at rank 17.1 -> 85.5; power 20 x 100 + 10 x (0 + ... + 19) = 3,900 W.
    k = at(fs, NOW.replace(minute=0, second=0) - 12 * HOUR)
    assert (fs["util_mean_pct"][k], fs["util_p10_pct"][k], fs["util_p90_pct"][k],
            fs["power_w"][k], fs["gpus_reporting"][k]) == (47.5, 9.5, 85.5, 3900.0, 20)
    # node-a's hour: 12 samples x 300 s x (100 + ... + 170 W) = 3,600 x 1,080 J = 1.08 kWh.
    assert fs["energy_kwh_by_host"]["node-a"][k] == pytest.approx(1.08, abs=1e-12)
    # 22 h ago: node-c's GPU 3 (95 %) not yet reporting: 0..90 % -> mean 45, p10 9, p90 81,
    # power 3,900 - 290 = 3,610 W; node-e's GPU (100 %, 400 W) 28 h ago makes 20 again.
    k = at(fs, NOW.replace(minute=0, second=0) - 22 * HOUR)
    assert (fs["util_mean_pct"][k], fs["util_p10_pct"][k], fs["util_p90_pct"][k],
            fs["power_w"][k], fs["gpus_reporting"][k]) == (45.0, 9.0, 81.0, 3610.0, 19)
    # 5 h ago: GPU 2 of node-c (90 %, 280 W) silent: 19 GPUs, mean (950 - 90) / 19.
    k = at(fs, NOW.replace(minute=0, second=0) - 5 * HOUR)
    assert fs["gpus_reporting"][k] == 19 and fs["power_w"][k] == 3900.0 - 280.0
    assert fs["util_mean_pct"][k] == round(860 / 19, 2)
    # The range's GPUs reporting: all 21 (node-e's only GPU reported 27-29 h ago).
    assert fs["totals"]["gpus_reporting"] == 21 and fs["totals"]["gpus"] == 21
    # The week's buckets up to the fill came from the store, not from the rollups.
    assert FleetBucket.objects.filter(team=team, step_s=3600).count() == 7 * 24 + 1  # to 12:00
    for key in RANGES:
        assert page(team, key) == live(team, key), key


def test_stored_rows_are_what_the_page_reads(fleet, team, monkeypatch):
    """Change a stored bucket by hand: the page shows it (so the equality above is not the live
    path compared with itself), and reads the rollups only after the stored buckets."""
    from greenops.telemetry import fleetroll
    from greenops.telemetry.models import FleetBucket, FleetFill

    fleetroll.fill(NOW)
    hour = NOW.replace(minute=0, second=0) - 12 * HOUR
    FleetBucket.objects.filter(team=team, step_s=3600, bucket=hour).update(util_mean=12.345)
    calls = spy_bucket_figures(
        monkeypatch, lambda gpus, resolution, start, end, step_s, **kw: (resolution, start, end))
    fs = page(team, "week")
    assert fs["util_mean_pct"][at(fs, hour)] == 12.35
    until = FleetFill.objects.get(team=team, step_s=3600).until
    assert calls == [("hour", until, NOW.replace(minute=0, second=0) + HOUR)]
    assert until == NOW.replace(minute=0, second=0)  # at 12:28:30 (grace) 11:00 had closed


def test_tail_reads_its_gpus_only_when_the_stored_buckets_lack_one(fleet, team, monkeypatch):
    """The GPUs reporting over a range are the stored buckets' GPUs plus the tail's: the tail
    is asked for its GPUs only when some team GPU is in no stored bucket, and a GPU whose first
    sample is in the tail is counted."""
    from greenops.telemetry import fleetroll

    fleetroll.fill(NOW)
    asked = spy_bucket_figures(monkeypatch, lambda *args, **kwargs: kwargs.get("with_ids"))
    # The week's stored hours hold all 21 GPUs (node-e's 27-29 h ago): no ids from the tail.
    fs = page(team, "week")
    assert asked == [False] and fs == live(team, "week")
    # The last hour's stored minutes lack node-e's GPU and node-c's silent GPU 2.
    asked.clear()
    fs = page(team, "hour")
    assert asked == [True] and fs == live(team, "hour")
    # node-f's only GPU reports first in the week's tail (12:00 to 13:00): 22 GPUs.
    f, _ = make_host(team, "node-f", gpus=1)
    store(f, [(0, NOW - dt.timedelta(seconds=20), 50.0, 200.0)])
    asked.clear()
    fs = page(team, "week")
    assert asked == [True] and fs["totals"]["gpus_reporting"] == 22
    assert fs == live(team, "week")


def test_late_batch_added_gpu_and_deleted_host_reach_the_stored_buckets(fleet, team):
    """After a fill: a late batch 8 h back (beyond the lookback), a host added with 6 h of
    history, a host deleted with its history. The stored buckets are stale until the next run
    (the test can fail), equal to the live path after it."""
    from greenops.telemetry import fleetroll
    from greenops.telemetry.models import Gpu, Host, delete_measurements

    fleetroll.fill(NOW)
    before = {key: page(team, key) for key in RANGES}
    late_minute = NOW.replace(minute=7, second=0) - 8 * HOUR
    # GPU 5 of node-a at 100 % for a minute between its 5-minute samples.
    store(fleet["a"], [(5, late_minute + dt.timedelta(seconds=150), 100.0, 150.0)])
    d, _ = make_host(team, "node-d", gpus=2)
    store(d, series(d, 0, (0, 1), NOW - 6 * HOUR, NOW, util=60.0, power=250.0))
    Host.objects.filter(id=fleet["e"].id).update(removed_at=NOW)
    delete_measurements(Host.objects.filter(id=fleet["e"].id))
    Gpu.objects.filter(host=fleet["e"]).delete()
    fleet["e"].delete()
    assert page(team, "day") != live(team, "day")  # stale: what the next run must repair
    fleetroll.fill(NOW)
    for key in RANGES:
        assert page(team, key) == live(team, key), key
        assert page(team, key) != before[key], key
    fs = page(team, "week")
    k = at(fs, late_minute.replace(minute=0))
    # That hour: GPU 5's 12 samples at 25 % and one at 100 % -> (300 + 100) / 13 % for it.
    assert fs["gpus_reporting"][k] == 19
    assert fs["totals"]["gpus_reporting"] == 22 and fs["totals"]["gpus"] == 22


def test_lookback_rebuilds_recent_buckets_without_a_fingerprint(fleet, team):
    """A batch for the last minutes arriving after a run: the next run's lookback (from the
    previous run's start, late.reach) recomputes them."""
    from greenops.telemetry import fleetroll

    fleetroll.fill(NOW - dt.timedelta(minutes=1))
    store(fleet["b"], [(0, NOW - dt.timedelta(minutes=20, seconds=-30), 100.0, 333.0)])
    assert page(team, "hour") != live(team, "hour")
    fleetroll.fill(NOW)
    for key in RANGES:
        assert page(team, key) == live(team, key), key


def test_no_stored_buckets_is_the_live_path(fleet, team):
    """A new install (no fill yet) draws the same charts, computed live."""
    from greenops.telemetry.models import FleetFill

    assert not FleetFill.objects.exists()
    for key in RANGES:
        assert page(team, key) == live(team, key)


def test_a_gap_in_the_stored_rows_falls_back_to_live(fleet, team):
    from greenops.telemetry import fleetroll
    from greenops.telemetry.models import FleetBucket

    fleetroll.fill(NOW)
    FleetBucket.objects.filter(team=team, step_s=3600).order_by("bucket")[10:11].get().delete()
    assert page(team, "week") == live(team, "week")


def test_fill_task_runs_on_the_rollups_queue(settings):
    from greenops.beat import lock_ttl_s

    assert settings.CELERY_BEAT_SCHEDULE["team-fleet-rollups"]["task"] == \
        "dashboards.tasks.fill_fleet_rollups"
    assert lock_ttl_s("dashboards.tasks.fill_fleet_rollups") > 600
    assert connection.vendor == "postgresql"


def test_energy_chart_stacks_the_top_hosts_and_the_rest_as_one_bar():
    """10 hosts: the 8 using the most energy drawn by name, the 2 least as '2 other hosts'
    whose bar is their sum; a bucket's stacked height stays the fleet's kWh."""
    from dashboards.fleet_charts import MAX_HOST_BARS, energy, host_bars

    assert MAX_HOST_BARS == 8
    by_host = {f"h{i}": [float(i), 1.0] for i in range(10)}  # h0 and h1 use the least
    bars = host_bars(by_host)
    assert [name for name, _ in bars] == [f"h{i}" for i in range(2, 10)] + ["2 other hosts"]
    assert bars[-1][1] == [0.0 + 1.0, 2.0]
    assert sum(kwh[0] for _, kwh in bars) == sum(v[0] for v in by_host.values())
    # 9 hosts fit: no "other" bar.
    nine = {k: v for k, v in list(by_host.items())[:9]}
    assert [name for name, _ in host_bars(nine)] == list(nine)
    fig = energy({"t": ["a", "b"], "step_s": 300, "simulated": False,
                  "energy_kwh_by_host": by_host})
    assert len(fig["data"]) == 9 and fig["data"][-1]["name"] == "2 other hosts"


def test_figure_script_escapes_like_json_script():
    import json

    from django.utils.html import json_script

    from dashboards.templatetags.readable import figure_script

    spec = {"name": "</script><b>&", "y": [1.5, None, 2]}
    ours = str(figure_script(spec, "fig-x"))
    assert "</script><b>" not in ours.split(">", 1)[1].rsplit("<", 1)[0]
    body = ours.split(">", 1)[1].rsplit("</script>", 1)[0]
    django_body = str(json_script(spec, "fig-x")).split(">", 1)[1].rsplit("</script>", 1)[0]
    assert json.loads(body) == json.loads(django_body) == spec
    assert ours.startswith('<script id="fig-x" type="application/json">')


def test_team_home_lists_twenty_hosts_offline_first(client, users, team):
    """25 hosts, 3 of them offline: the home's table shows 20 rows, the 3 offline first, and
    says how many there are with a link to the Hosts page."""
    import re

    from django.utils import timezone

    from greenops.telemetry.models import Host

    for i in range(25):
        make_host(team, f"n-{i:02d}", gpus=1)
    Host.objects.filter(team=team).exclude(name__in=["n-07", "n-13", "n-21"]).update(
        last_seen=timezone.now())
    client.force_login(users["member"])
    html = client.get(f"/teams/{team.slug}/").content.decode()
    table = html.split('id="hosts"', 1)[1].split("</table>", 1)[0]
    names = re.findall(r">(n-\d\d)</a>", table)
    assert names[:3] == ["n-07", "n-13", "n-21"] and len(names) == 20
    assert names[3:] == [f"n-{i:02d}" for i in range(25) if i not in (7, 13, 21)][:17]
    assert "Showing 20 of 25 hosts" in html and f"/teams/{team.slug}/hosts/" in html
    assert table.count('status offline">offline') == 3
    assert table.count('status online">online') == 17
    assert table.count("<td>1</td>") == 20  # each host's one GPU


def test_team_home_host_rows_escape_what_agents_and_users_wrote(client, users, team):
    """The host table's rows are built in Python (figures.host_rows), not by the template's
    autoescape: a host name, instance type, region and agent version holding markup appear as
    text, each row links to its own host page, and a host never seen says so."""
    import datetime as dt

    from greenops.telemetry.models import Host

    evil, _ = make_host(team, 'a"><script>alert(1)</script>', gpus=3)
    Host.objects.filter(pk=evil.pk).update(
        instance_type="<img src=x onerror=alert(2)>", region="us-'east'", agent_version="<b>1</b>",
        last_seen=dt.datetime(2026, 11, 30, 9, 5, 7, tzinfo=dt.UTC))
    plain, _ = make_host(team, "plain", gpus=1)
    Host.objects.filter(pk=plain.pk).update(instance_type="", region="", agent_version="")
    client.force_login(users["member"])
    html = client.get(f"/teams/{team.slug}/").content.decode()
    table = html.split('id="hosts"', 1)[1].split("</table>", 1)[0]
    assert "<script>" not in table and "<img" not in table and "<b>1</b>" not in table
    assert (f'<a href="/teams/{team.slug}/hosts/{evil.pk}/">a&quot;&gt;&lt;script&gt;alert(1)'
            "&lt;/script&gt;</a>") in table
    assert "&lt;img src=x onerror=alert(2)&gt;" in table and "us-&#x27;east&#x27;" in table
    assert '<td class="wide-only">&lt;b&gt;1&lt;/b&gt;</td>' in table
    assert ' title="2026-11-30 09:05:07 UTC">' in table and "<td>3</td>" in table
    # The host with nothing reported: en dashes, no region span, never seen, no title.
    row = table.split(f"/hosts/{plain.pk}/", 1)[1].split("</tr>", 1)[0]
    assert row.count("<td>–</td>") == 1 and '<td class="wide-only">–</td>' in row
    assert "<td>never</td>" in row and "title=" not in row and "offline" in row


@pytest.mark.django_db
def test_home_offline_flags_are_the_negation_of_is_online(team):
    """team_hosts' offline flags (the home's ordering and badges) and Host.is_online (host
    pages, status) draw the line at the same second: seen 120 s ago is online, 121 s ago
    offline; offline hosts first, by name within each group."""
    from django.utils import timezone

    from greenops.telemetry.fleet import team_hosts
    from greenops.telemetry.models import ONLINE_WINDOW_S, Host

    now = timezone.now()
    for name, age_s in (("fresh", 0), ("edge", ONLINE_WINDOW_S), ("late", ONLINE_WINDOW_S + 1)):
        make_host(team, name, gpus=1)
        Host.objects.filter(name=name).update(last_seen=now - dt.timedelta(seconds=age_s))
    make_host(team, "never", gpus=1)
    rows = team_hosts(team, now)
    assert [(h["name"], h["offline"]) for h in rows] == [
        ("late", True), ("never", True), ("edge", False), ("fresh", False)]
    assert {h.name for h in Host.objects.filter(team=team) if not h.is_online(now)} == {
        h["name"] for h in rows if h["offline"]}
    assert all(len(h["gpu_ids"]) == 1 for h in rows)


@pytest.mark.parametrize("ids", [[], [0], [7, 8, 7], [1, 63, 64, 65], [49_999, 3, 1_000]])
def test_gpu_bitmap_sets_one_bit_per_gpu_id(ids):
    """The stored buckets' GPU bitmaps (and the live tail's, unioned with them for "GPUs
    reporting"): bit i set exactly for each Gpu id i, duplicates once, sparse ids included."""
    from greenops.telemetry.fleet import gpu_bitmap

    bits = gpu_bitmap(ids)
    assert bits == sum(1 << i for i in set(ids))
    assert bits.bit_count() == len(set(ids))


@pytest.mark.parametrize("age_s, text", [(0, "<1 min ago"), (59, "<1 min ago"),
                                         (60, "1 min ago"), (3599, "59 min ago"),
                                         (3600, "1 h ago"), (2 * 86400 - 1, "47 h ago"),
                                         (2 * 86400, "2 d ago"), (-30, "<1 min ago")])
def test_host_table_ages_are_short(age_s, text):
    """The team home's host table says how long ago a host was seen in a few characters (it
    must fit a 390 px phone beside name, status, GPUs and instance); "never" for no time."""
    from dashboards.templatetags.readable import ago

    assert ago(NOW - dt.timedelta(seconds=age_s), NOW) == text
    assert ago(None) == "never"


def test_host_table_last_seen_title_is_utc():
    """The host table's "last seen" title says UTC and is UTC, whatever zone the time is in."""
    from zoneinfo import ZoneInfo

    from dashboards.templatetags.readable import utc

    assert utc(dt.datetime(2026, 12, 1, 9, 5, 7, 999, tzinfo=ZoneInfo("America/New_York"))) == (
        "2026-12-01 14:05:07")
    assert utc(NOW) == "2026-11-30 12:30:30"
    assert utc(None) == ""


def _recent(host, first: int, n_gpus: int, start: dt.datetime, end: dt.datetime,
            skip: dict[int, dt.datetime] | None = None) -> list:
    """Samples every 5 s in [start, end) for the host's GPUs 0..n_gpus-1; `skip`: GPU index ->
    the time its samples stop."""
    out = []
    t = start
    while t < end:
        out += [(i, t, 5.0 * (first + i), 100.0 + 10 * (first + i)) for i in range(n_gpus)
                if t < (skip or {}).get(i, end)]
        t += dt.timedelta(seconds=5)
    return out


def test_a_bucket_is_stored_before_the_grace_once_the_data_say_it_is_complete(team):
    """At 12:30:30 every GPU has stored samples through 12:30:20 and no batch is overtaken: the
    12:29 minute (ended 30 s ago, inside the 60 s grace) is complete and stored, so the page
    computes only the open minute live. A GPU that reported within the grace but is behind
    holds the watermark; a waiting batch overtaken by a later one of its host, or no GPU
    reporting within the grace, leaves the grace alone to decide; a GPU silent for longer than
    the grace is not waited for. A batch replayed later for the early-stored minute is found by
    the next run's lookback."""
    from greenops.telemetry import fleetroll
    from greenops.telemetry.fleet import fleet_series, team_fleet_series
    from greenops.telemetry.models import FleetFill, IngestBatch
    from greenops.telemetry.queries import team_gpus

    a, _ = make_host(team, "node-a", gpus=8)
    b, _ = make_host(team, "node-b", gpus=9)
    silent, _ = make_host(team, "node-s", gpus=1)
    ids = sorted(team_gpus(team), key=lambda g: g.id)
    gpu_ids = [g.id for g in ids]
    minute = NOW.replace(second=0)  # 12:30
    start = minute - 5 * dt.timedelta(minutes=1)
    # Nothing within the grace yet (samples through 12:29:25): the grace decides.
    store(a, _recent(a, 0, 8, start, NOW - dt.timedelta(seconds=65)))
    assert fleetroll.complete_through(team, gpu_ids, NOW) is None
    store(a, _recent(a, 0, 8, NOW - dt.timedelta(seconds=65), NOW - dt.timedelta(seconds=5)))
    store(b, _recent(b, 8, 9, start, NOW - dt.timedelta(seconds=5),
                     skip={3: minute - dt.timedelta(seconds=10)}))
    store(silent, _recent(silent, 17, 1, start, NOW - dt.timedelta(seconds=90)))
    # node-b's GPU 3 last sent 12:29:45 (within the grace): the data are complete to there
    # only, and 12:29 is not.
    assert fleetroll.complete_through(team, gpu_ids, NOW) == minute - dt.timedelta(seconds=15)
    fleetroll.fill(NOW)
    assert FleetFill.objects.get(team=team, step_s=60).until == minute - dt.timedelta(minutes=1)
    # Its samples to 12:30:20 arrive; node-s (silent since 12:29:00) is not waited for.
    store(b, [(3, minute - dt.timedelta(seconds=10) + dt.timedelta(seconds=5 * k), 15.0, 130.0)
              for k in range(7)])
    assert fleetroll.complete_through(team, gpu_ids, NOW) == NOW - dt.timedelta(seconds=10)
    # A batch waiting to be stored holds samples newer than its host's stored ones (spool
    # order) -- unless a batch the host sent after it was stored first: then the grace decides.
    sent = NOW - dt.timedelta(seconds=8)
    pending = IngestBatch.objects.create(host=a, n_samples=1, payload=b"{}", received_at=sent)
    assert fleetroll.complete_through(team, gpu_ids, NOW) == NOW - dt.timedelta(seconds=10)
    IngestBatch.objects.create(host=b, n_samples=1, payload=b"", status="done",
                               received_at=sent + dt.timedelta(seconds=1))  # another host's
    assert fleetroll.complete_through(team, gpu_ids, NOW) == NOW - dt.timedelta(seconds=10)
    overtaking = IngestBatch.objects.create(host=a, n_samples=1, payload=b"", status="done",
                                            received_at=sent + dt.timedelta(seconds=2))
    assert fleetroll.complete_through(team, gpu_ids, NOW) is None
    pending.delete()
    overtaking.delete()
    fleetroll.fill(NOW)
    fill = FleetFill.objects.get(team=team, step_s=60)
    assert fill.until == minute  # 12:29 stored 30 s after its end
    live = fleet_series(team_gpus(team), "hour", NOW)
    assert team_fleet_series(team, "hour", NOW) == live
    k = at(live, minute - dt.timedelta(minutes=1))
    assert live["gpus_reporting"][k] == 17  # node-s went silent at 12:29:00, before 12:29
    # A replayed sample for 12:29 after the early store (an agent back from an outage): the
    # next run's lookback recomputes the minute, and the page again equals the live figures.
    store(silent, [(0, minute - dt.timedelta(seconds=30), 85.0, 270.0)])
    later = NOW + dt.timedelta(seconds=60)
    fleetroll.fill(later)
    fs = team_fleet_series(team, "hour", later)
    assert fs == fleet_series(team_gpus(team), "hour", later)
    assert fs["gpus_reporting"][at(fs, minute - dt.timedelta(minutes=1))] == 18


def test_lookback_recomputes_only_the_hours_whose_rollups_changed(fleet, team):
    """Issue 35: the minute grids' lookback compares each whole hour's stored samples with the
    hour rollups instead of recomputing every bucket from the per-GPU minute rows each run.
    Runs at 12:29:30 then 12:30:30 with nothing new: the 300 s grid recomputes nothing (it
    recomputed 10:00-12:25, 30 buckets, before); the 60 s grid only the part of its kept hour
    before the first whole hour (11:29-12:00, 31) and the new minute 12:29. A late sample at
    11:07:30 (inside the lookback, outside the 60 s grid's hour) recomputes that hour's 12
    buckets at 300 s, and the 60 s grid's edge again (31 at 12:30:50)."""
    from greenops.telemetry import fleetroll

    fleetroll.fill(NOW - dt.timedelta(minutes=1))
    done = fleetroll.fill_team(team, NOW)
    assert done[300]["buckets"] == 0 and done[60]["buckets"] == 31 + 1
    store(fleet["b"], [(0, NOW.replace(minute=7, second=30) - HOUR, 100.0, 333.0)])
    assert page(team, "day") != live(team, "day")  # stale until the next run
    done = fleetroll.fill_team(team, NOW + dt.timedelta(seconds=20))
    assert done[300]["buckets"] == 12 and done[60]["buckets"] == 31
    for key in RANGES:
        assert page(team, key) == live(team, key), key


def test_open_bucket_cells_stand_in_for_its_complete_minutes(fleet, team, monkeypatch):
    """Issue 35: each run stores the open display bucket's complete rollup steps summed per GPU
    (FleetOpenCell), and a view adds only the rollup rows after them. At 12:30:30 (grace: 12:29:30)
    the day chart's 12:25 bucket has its cells over [12:25, 12:29): the 12:25:30 samples of the
    19 GPUs reporting (node-c's GPU 2 is silent). The page reads them: a cell changed by hand
    shows -- node-a's GPU 0 (0 %) made 100 % moves the bucket's mean from 860/19 to 960/19 --
    and it adds what came after 12:29 live."""
    from greenops.telemetry import fleetroll
    from greenops.telemetry.models import FleetFill, FleetOpenCell, Gpu

    fleetroll.fill(NOW)
    bucket, through = NOW.replace(minute=25, second=0), NOW.replace(minute=29, second=0)
    fill = FleetFill.objects.get(team=team, step_s=300)
    assert (fill.until, fill.open_through, fill.open_cells) == (bucket, through, 19)
    assert FleetOpenCell.objects.filter(team=team, step_s=300, bucket=bucket,
                                        through=through).count() == 19
    # Steps that are their rollup's own (the hour's minutes, the week's hours, the quarter's
    # days) keep none; the month's 3-hour bucket from 12:00 has no complete hour yet.
    assert set(FleetFill.objects.filter(team=team, open_through__isnull=False)
               .values_list("step_s", flat=True)) == {300}
    calls = spy_bucket_figures(monkeypatch, lambda *args, **kwargs: kwargs.get("open_cells"))
    fs = page(team, "day")
    assert calls == [(through, 19)] and fs == live(team, "day")
    k = at(fs, bucket)
    assert fs["util_mean_pct"][k] == round(860 / 19, 2) and fs["gpus_reporting"][k] == 19
    gpu0 = Gpu.objects.get(host=fleet["a"], index=0)
    # Its one sample at 100 %, and a second sample counted, so that the next run, which keeps
    # cells whose samples still match the rollups', sees the change.
    FleetOpenCell.objects.filter(team=team, step_s=300, gpu_id=gpu0.id).update(
        util_sum=100.0 * 1, samples=2)
    assert page(team, "day")["util_mean_pct"][k] == round(960 / 19, 2)
    fleetroll.fill(NOW)  # rewritten from the rollups
    assert page(team, "day") == live(team, "day")
    # A sample after the cells (12:29:40): read live, no run needed.
    store(fleet["c"], [(2, NOW - dt.timedelta(seconds=50), 50.0, 250.0)])
    fs = page(team, "day")
    assert fs == live(team, "day") and fs["gpus_reporting"][k] == 20


def test_a_late_sample_inside_the_open_cells_reaches_the_page_at_the_next_run(fleet, team):
    """Like a stored bucket's: stale until the next run, then equal to the live figures."""
    from greenops.telemetry import fleetroll

    fleetroll.fill(NOW)
    store(fleet["b"], [(0, NOW.replace(minute=26, second=10), 100.0, 333.0)])
    assert page(team, "day") != live(team, "day")
    fleetroll.fill(NOW)
    assert page(team, "day") == live(team, "day")


def test_open_cells_gone_fall_back_to_the_rollup_rows(fleet, team, monkeypatch):
    """A view that read FleetFill before two runs replaced its cells finds none: it computes the
    tail from the rollups alone (the test fails if it drew the bucket without them)."""
    from greenops.telemetry import fleetroll
    from greenops.telemetry.models import FleetOpenCell

    fleetroll.fill(NOW)
    FleetOpenCell.objects.filter(team=team).delete()
    calls = spy_bucket_figures(monkeypatch, lambda *args, **kwargs: kwargs.get("open_cells"))
    fs = page(team, "day")
    assert calls == [(NOW.replace(minute=29, second=0), 19), None]
    assert fs == live(team, "day")
    assert fs["gpus_reporting"][at(fs, NOW.replace(minute=25, second=0))] == 19


def test_each_run_keeps_the_previous_runs_cells_and_drops_older_ones(fleet, team):
    """A view reads FleetFill, then the cells it names: the run after it must not have removed
    them. 12:29:30 writes [12:25, 12:28), 12:30:30 [12:25, 12:29) and keeps the first, 12:31:30
    (12:30 bucket, nothing complete yet) keeps only the second."""
    from greenops.telemetry import fleetroll
    from greenops.telemetry.models import FleetFill, FleetOpenCell

    def generations():
        return set(FleetOpenCell.objects.filter(team=team, step_s=300)
                   .values_list("bucket", "through").distinct())

    b25 = NOW.replace(minute=25, second=0)
    fleetroll.fill(NOW - dt.timedelta(minutes=1))
    assert generations() == {(b25, b25 + dt.timedelta(minutes=3))}
    fleetroll.fill(NOW)
    assert generations() == {(b25, b25 + dt.timedelta(minutes=3)),
                             (b25, b25 + dt.timedelta(minutes=4))}
    # The same generation again (the previous run's), after a late sample inside it: rewritten,
    # not doubled; the one before it is two runs old.
    store(fleet["b"], [(0, NOW.replace(minute=26, second=10), 100.0, 333.0)])
    fleetroll.fill(NOW)
    assert generations() == {(b25, b25 + dt.timedelta(minutes=4))}
    assert FleetOpenCell.objects.filter(team=team, step_s=300).count() == 19
    later = NOW + dt.timedelta(minutes=1)
    fleetroll.fill(later)
    assert generations() == {(b25, b25 + dt.timedelta(minutes=4))}
    assert FleetFill.objects.get(team=team, step_s=300).open_through is None
    for key in RANGES:
        assert team_fleet_series_at(team, key, later) == live_at(team, key, later), key


def test_open_cells_of_the_month_hours_at_any_clock(fleet, team):
    """The month's 3-hour buckets from hour rollups: at 14:10 (fill at 14:09:10) the 12:00 bucket
    has cells over 12:00-14:00 (12:00's samples; the fleet stopped at 12:25:30) and every range
    equals the live figures; the same at 12:30:30 and 13:05."""
    from greenops.telemetry import fleetroll
    from greenops.telemetry.models import FleetFill

    for clock in (NOW, NOW.replace(hour=13, minute=5), NOW.replace(hour=14, minute=10)):
        fleetroll.fill(clock - dt.timedelta(seconds=50))
        for key in RANGES:
            assert team_fleet_series_at(team, key, clock) == live_at(team, key, clock), key
    fill = FleetFill.objects.get(team=team, step_s=10800)
    assert (fill.until, fill.open_through, fill.open_cells) == (
        NOW.replace(minute=0, second=0), NOW.replace(hour=14, minute=0, second=0), 19)


def live_at(team, key, clock):
    from greenops.telemetry.fleet import fleet_series
    from greenops.telemetry.queries import team_gpus

    return fleet_series(team_gpus(team), key, clock)


def team_fleet_series_at(team, key, clock):
    from greenops.telemetry.fleet import team_fleet_series

    return team_fleet_series(team, key, clock)


def test_open_cells_that_still_hold_the_rollups_are_not_rewritten(fleet, team):
    """The month's cells change once an hour: a run that finds them holding the rollups' samples
    keeps them (the same rows), and a late sample inside their hours has them rewritten, so the
    page again equals the live figures."""
    from greenops.telemetry import fleetroll
    from greenops.telemetry.models import FleetOpenCell

    clock = NOW.replace(hour=14, minute=10)

    def cell_ids():
        return set(FleetOpenCell.objects.filter(team=team, step_s=10800)
                   .values_list("id", flat=True))

    fleetroll.fill(clock - dt.timedelta(seconds=50))
    first = cell_ids()
    assert len(first) == 19
    fleetroll.fill(clock - dt.timedelta(seconds=40))
    assert cell_ids() == first
    store(fleet["a"], [(5, NOW.replace(minute=20, second=10), 100.0, 150.0)])
    assert team_fleet_series_at(team, "month", clock) != live_at(team, "month", clock)
    fleetroll.fill(clock - dt.timedelta(seconds=30))
    assert cell_ids().isdisjoint(first) and len(cell_ids()) == 19
    for key in RANGES:
        assert team_fleet_series_at(team, key, clock) == live_at(team, key, clock), key
