"""Which accelerator, how many replicas (issue 33 item 4): one model served on different device
models compared per inference, and the replicas a p99 target needs, all hand-computed from KPI
hour rows written as the KPI rollup writes them (greenops.kpis.rollup)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from greenops import windows
from greenops.advisor import diagnose, fleet
from greenops.advisor.measure import Monthly
from greenops.kpis.models import KpiRollup, Period
from greenops.telemetry.models import Gpu, GpuHour
from greenops.workloads.models import Workload
from tests.support.factories import make_host

MODEL = "llama-3-8b"


def hour(k: int) -> dt.datetime:
    """The k-th finished hour before the current one (k = 1: the last finished hour)."""
    return windows.floor_hour(timezone.now()) - dt.timedelta(hours=k)


def service(team, slug: str, devices: list[str], **fields) -> Workload:
    host, _ = make_host(team, name=f"{slug}-host", gpus=len(devices))
    for gpu, name in zip(Gpu.objects.filter(host=host).order_by("index"), devices, strict=True):
        gpu.name = name
        gpu.save()
    wl = Workload.objects.create(team=team, name=slug, slug=slug, kind="inference", **fields)
    wl.hosts.add(host)
    return wl


def kpi_hour(
    team,
    wl,
    k: int,
    requests: int,
    *,
    energy_j: float = 0.0,
    co2e_g: float = 0.0,
    cost_usd: float | None = 0.0,
    measured_s: float | None = 3600.0,
    buckets: dict | None = None,
) -> None:
    KpiRollup.objects.create(
        team=team,
        workload=wl,
        period=Period.HOUR,
        bucket=hour(k),
        requests=requests,
        success=requests,
        measured_s=measured_s,
        util_sum=50.0 * 60,
        util_n=60,
        gpu_minutes=60,
        gpu_energy_j=energy_j,
        co2e_g=co2e_g,
        cost_usd=cost_usd,
        latency_buckets=buckets or {},
    )


# ---- Which accelerator ------------------------------------------------------------------


@pytest.fixture
def mixed_fleet(team):
    """One model on an H100 (A), an L4 (B), an A100 with too few requests (C) and a service
    spread over two device models (D). Two hours each of:
    A: 36,000 requests over 3,600 s, 3.6e6 J, 360 g CO2e, $3.60 -> 100 J, 0.01 g, $0.0001
       per inference; 72,000 requests in 7,200 s -> 10 /s -> 25,920,000 a month (2,592,000 s).
    B: 18,000 requests, 0.9e6 J, 360 g, $0.72 -> 50 J, 0.02 g, $0.00004 per inference;
       5 /s -> 12,960,000 a month.
    C: 250 requests an hour -> 500 counted (fewer than 1,000)."""
    a = service(team, "chat-h100", ["NVIDIA H100 80GB HBM3"], served_model=MODEL)
    b = service(team, "chat-l4", ["NVIDIA L4"], served_model=MODEL)
    c = service(team, "chat-a100", ["NVIDIA A100-SXM4-40GB"], served_model=MODEL)
    d = service(team, "chat-mixed", ["NVIDIA H100 80GB HBM3", "NVIDIA L4"], served_model=MODEL)
    other = service(team, "ranker", ["NVIDIA L4"], served_model="bert-ranker")
    for k in (1, 2):
        kpi_hour(team, a, k, 36_000, energy_j=3.6e6, co2e_g=360.0, cost_usd=3.60)
        kpi_hour(team, b, k, 18_000, energy_j=0.9e6, co2e_g=360.0, cost_usd=0.72)
        kpi_hour(team, c, k, 250, energy_j=0.1e6, co2e_g=10.0, cost_usd=0.5)
        kpi_hour(team, d, k, 36_000, energy_j=1e6, co2e_g=100.0, cost_usd=1.0)
        kpi_hour(team, other, k, 36_000, energy_j=1e6, co2e_g=100.0, cost_usd=1.0)
    return a, b, c, d


@pytest.mark.django_db
def test_same_model_on_two_accelerators_is_compared_per_inference(mixed_fleet):
    a, b, c, d = mixed_fleet
    comp = fleet.compare_accelerators(a, diagnose.window("week"))
    assert comp.model == MODEL
    rows = {r.workload.slug: r for r in comp.rows}
    assert set(rows) == {"chat-h100", "chat-l4", "chat-a100", "chat-mixed"}  # not the ranker
    ra, rb = rows["chat-h100"], rows["chat-l4"]
    assert (ra.device, ra.requests, ra.unknown) == ("NVIDIA H100 80GB HBM3", 72_000, "")
    assert ra.j_per_inference == pytest.approx(100.0)  # 7.2e6 J / 72,000
    assert ra.usd_per_inference == pytest.approx(0.0001)  # $7.20 / 72,000
    assert ra.co2e_g_per_inference == pytest.approx(0.01)  # 720 g / 72,000
    assert ra.requests_per_month == pytest.approx(25_920_000)  # 72,000 / 7,200 s x 2,592,000
    assert rb.j_per_inference == pytest.approx(50.0)  # 1.8e6 / 36,000
    assert rb.usd_per_inference == pytest.approx(0.00004)  # $1.44 / 36,000
    assert rb.co2e_g_per_inference == pytest.approx(0.02)  # 720 g / 36,000
    assert rows["chat-a100"].unknown == (
        "500 requests counted in the range; a comparison needs at least 1,000"
    )
    assert rows["chat-mixed"].unknown.startswith("served on several device models at once")
    assert rows["chat-mixed"].device == "NVIDIA H100 80GB HBM3 + NVIDIA L4"
    assert comp.cheapest.workload == b and comp.greenest.workload == a
    moves = {(m.source.workload.slug, m.why): m for m in comp.moves}
    assert set(moves) == {("chat-h100", "cheapest"), ("chat-l4", "greenest")}
    to_l4 = moves[("chat-h100", "cheapest")]
    # ($0.0001 - $0.00004) x 25,920,000 = $1,555.20; (100 - 50) J x 25,920,000 / 3.6e6 =
    # 360 kWh; (0.01 - 0.02) g x 25,920,000 / 1000 = -259.2 kg: cheaper but dirtier.
    assert to_l4.usd_saved == pytest.approx(1555.2)
    assert to_l4.kwh_saved == pytest.approx(360.0)
    assert to_l4.co2e_kg_saved == pytest.approx(-259.2)
    to_h100 = moves[("chat-l4", "greenest")]
    # (0.02 - 0.01) g x 12,960,000 / 1000 = 129.6 kg; ($0.00004 - $0.0001) x 12,960,000 =
    # -$777.60; (50 - 100) J x 12,960,000 / 3.6e6 = -180 kWh.
    assert to_h100.co2e_kg_saved == pytest.approx(129.6)
    assert to_h100.usd_saved == pytest.approx(-777.6)
    assert to_h100.kwh_saved == pytest.approx(-180.0)


@pytest.mark.django_db
def test_one_device_model_or_no_model_name_compares_nothing(team):
    a = service(team, "chat-h100", ["NVIDIA H100 80GB HBM3"], served_model=MODEL)
    b = service(team, "chat-h100-b", ["NVIDIA H100 80GB HBM3"], served_model=MODEL)
    plain = service(team, "plain", ["NVIDIA L4"])
    for wl in (a, b):
        kpi_hour(team, wl, 1, 5_000, energy_j=1e6, co2e_g=10.0, cost_usd=1.0)
    comp = fleet.compare_accelerators(a, diagnose.window("week"))
    assert comp.cheapest is None and comp.moves == []
    assert comp.unknown == (
        f"“{MODEL}” is measured on 1 device model(s) with enough requests; a comparison needs two"
    )
    assert fleet.compare_accelerators(plain, diagnose.window("week")) is None


@pytest.mark.django_db
def test_an_unpriced_service_is_never_the_cheapest_and_its_saving_is_unknown(team):
    a = service(team, "chat-h100", ["NVIDIA H100 80GB HBM3"], served_model=MODEL)
    b = service(team, "chat-l4", ["NVIDIA L4"], served_model=MODEL)
    kpi_hour(team, a, 1, 36_000, energy_j=3.6e6, co2e_g=360.0, cost_usd=3.60)
    kpi_hour(team, b, 1, 18_000, energy_j=0.9e6, co2e_g=90.0, cost_usd=None)  # no price
    comp = fleet.compare_accelerators(a, diagnose.window("week"))
    assert comp.cheapest.workload == a  # the only priced one
    # B is greener (0.005 g vs 0.01 g): moving A there saves CO2e; its $ is unknown.
    move = next(m for m in comp.moves if m.why == "greenest")
    assert move.source.workload == a and move.usd_saved is None
    # (0.01 - 0.005) g x (36,000 / 3,600 s x 2,592,000 = 25,920,000) / 1000 = 129.6 kg
    assert move.co2e_kg_saved == pytest.approx(129.6)


# ---- How many replicas ------------------------------------------------------------------


def hist(le: list[float], cumulative: list[int]) -> dict:
    return {"le_ms": le, "cumulative": cumulative}


LE = [100.0, 200.0, 400.0]


@pytest.fixture
def chat(team):
    """A 4-GPU service with a 200 ms p99 target and five finished hours:
    h1: 7,200 requests in 3,600 s = 2 /s on 4 reporting GPUs = 0.5 /s a replica; p99: rank
        0.99 x 7,200 = 7,128 in the 100-200 bucket (7,000 -> 7,200): 100 + 100 x 128/200 =
        164 ms, meets.
    h2: 36,000 = 10 /s on 2 GPUs = 5 /s a replica; rank 35,640 in 100-200 (30,000 -> 35,700):
        100 + 100 x 5,640/5,700 = 198.95 ms, meets.
    h3: 36,000 = 10 /s on 1 GPU = 10 /s a replica; rank 35,640 past 400 ms (+Inf bucket):
        p99 >= 400 ms, missed -- not a capacity at the target.
    h4: 18,000 with no histogram: p99 unknown.
    h5: requests with unknown counting seconds: skipped."""
    wl = service(team, "chat", ["NVIDIA L4"] * 4, p99_target_ms=200.0)
    gpus = list(wl.gpu_queryset().order_by("index").values_list("id", flat=True))
    kpi_hour(team, wl, 1, 7_200, buckets=hist(LE, [7_000, 7_200, 7_200, 7_200]))
    kpi_hour(team, wl, 2, 36_000, buckets=hist(LE, [30_000, 35_700, 36_000, 36_000]))
    kpi_hour(team, wl, 3, 36_000, buckets=hist(LE, [20_000, 30_000, 35_000, 36_000]))
    kpi_hour(team, wl, 4, 18_000)
    kpi_hour(team, wl, 5, 500, measured_s=None)
    for k, n in ((1, 4), (2, 2), (3, 1), (4, 4), (5, 4)):
        for gpu_id in gpus[:n]:
            GpuHour.objects.create(gpu_id=gpu_id, bucket=hour(k), samples=60)
    return wl


@pytest.mark.django_db
def test_replicas_for_the_p99_target_from_the_measured_hours(chat):
    m = Monthly(kwh=1000.0, co2e_kg=400.0, usd=2000.0, usd_problem="", scale=1.0)
    a = fleet.replicas(chat, diagnose.window("week"), m)
    by_k = {h.bucket: h for h in a.hours}
    assert by_k[hour(1)].p99_ms == pytest.approx(164.0) and by_k[hour(1)].meets is True
    assert by_k[hour(2)].p99_ms == pytest.approx(100 + 100 * 5640 / 5700)
    assert by_k[hour(3)].p99_above and by_k[hour(3)].meets is False
    assert by_k[hour(4)].meets is None
    assert a.skipped_hours == [
        f"{hour(5):%Y-%m-%d %H:00}: the seconds its requests were counted over are unknown"
    ]
    assert a.capacity_per_s == pytest.approx(5.0) and a.capacity_hour.bucket == hour(2)
    # Peak 10 /s (h2 and h3 tie; the later hour is named), lowest 2 /s (h1).
    assert a.peak.rate_per_s == pytest.approx(10.0) and a.low.rate_per_s == pytest.approx(2.0)
    # ceil(10 x 1.2 / 5) = ceil(2.4) = 3 replicas; ceil(2 x 1.2 / 5) = ceil(0.48) = 1 at least.
    assert (a.replicas_now, a.needed, a.min_replicas, a.surplus) == (4, 3, 1, 1)
    # One of four replicas: a quarter of the month's 1,000 kWh, 400 kg and $2,000.
    assert a.effect.kwh_saved == pytest.approx(250.0)
    assert a.effect.co2e_kg_saved == pytest.approx(100.0)
    assert a.effect.usd_saved == pytest.approx(500.0)
    # 5 / 1.2 = 4.1667 requests a second per pod: 4,166 milli-requests.
    assert "minReplicas: 1\n  maxReplicas: 3\n" in a.hpa_yaml
    assert 'averageValue: "4166m"' in a.hpa_yaml
    assert "name: chat\n" in a.hpa_yaml


@pytest.mark.django_db
def test_no_hour_met_the_target_leaves_the_count_unknown(team, chat):
    chat.p99_target_ms = 50.0  # every measured p99 is above 100 ms
    a = fleet.replicas(chat, diagnose.window("week"), None)
    assert a.needed is None and a.effect is None and a.hpa_yaml == ""
    assert a.unknown == (
        "no hour met the 50 ms p99 target (3 of 4 hours had a p99 from at "
        "least 100 requests): the capacity of a replica at the target is not "
        "known"
    )


@pytest.mark.django_db
def test_no_target_no_advice_and_too_few_requests_give_no_p99(team):
    wl = service(team, "quiet", ["NVIDIA L4"])
    assert fleet.replicas(wl, diagnose.window("week"), None) is None
    wl.p99_target_ms = 200.0
    kpi_hour(team, wl, 1, 99, buckets=hist(LE, [99, 99, 99, 99]))
    GpuHour.objects.create(gpu_id=wl.gpu_queryset().get().id, bucket=hour(1), samples=60)
    a = fleet.replicas(wl, diagnose.window("week"), None)
    assert a.hours[0].p99_ms is None  # 99 requests: fewer than 100
    assert a.unknown.startswith("no hour met the 200 ms p99 target (0 of 1 hours")


@pytest.mark.django_db
def test_page_shows_the_comparison_and_the_replica_advice(
    client, team_roles, team, mixed_fleet, chat
):
    a = mixed_fleet[0]
    client.force_login(team_roles["viewer"])
    html = client.get(f"/teams/{team.slug}/advisor/workloads/{a.slug}/?range=week").content.decode()
    assert 'id="accelerators"' in html and "NVIDIA L4" in html
    assert "$1,555" in html  # the move to the cheapest, per month
    assert "−$778" in html  # the move to the greenest costs more
    assert "500 requests counted in the range" in html
    html = client.get(
        f"/teams/{team.slug}/advisor/workloads/{chat.slug}/?range=week"
    ).content.decode()
    assert 'id="replicas"' in html
    assert "maxReplicas: 3" in html
    client.force_login(team_roles["outsider"])
    assert client.get(f"/teams/{team.slug}/advisor/workloads/{chat.slug}/").status_code in (
        403,
        404,
    )


@pytest.mark.django_db
def test_api_gives_the_same_figures_with_reasons_for_nulls(client, team_roles, team,
                                                           mixed_fleet, chat):
    a = mixed_fleet[0]
    client.force_login(team_roles["viewer"])
    url = f"/api/v1/teams/{team.slug}/workloads/{{}}/fleet-advice"
    data = client.get(url.format(a.slug), {"range": "week"}).json()
    acc = data["accelerators"]
    assert (acc["model"], acc["cheapest"], acc["greenest"]) == (MODEL, "chat-l4", "chat-h100")
    rows = {r["workload"]: r for r in acc["rows"]}
    assert rows["chat-h100"]["usd_per_1k_inferences"] == pytest.approx(0.1)  # $0.0001 x 1000
    assert rows["chat-h100"]["co2e_g_per_1k_inferences"] == pytest.approx(10.0)
    assert rows["chat-a100"]["compared"] is False
    move = next(m for m in acc["moves"] if m["from"] == "chat-h100")
    assert move["usd_saved_per_month"] == pytest.approx(1555.2)
    assert data["replicas"] is None
    assert data["replicas_unknown"] == "the workload has no p99 target"
    data = client.get(url.format(chat.slug), {"range": "week"}).json()
    assert data["accelerators"] is None
    assert data["accelerators_unknown"] == "the workload names no served model"
    rep = data["replicas"]
    assert (rep["needed"], rep["min_replicas"], rep["replicas_now"], rep["surplus"]) == (
        3, 1, 4, 1)
    assert rep["capacity_per_replica_per_s"] == pytest.approx(5.0)
    # No GPU telemetry behind these hours: the surplus's month is unknown, with the reason.
    assert rep["surplus_cost"]["usd_per_month"] is None
    assert rep["surplus_cost"]["unknown"]["usd_per_month"].startswith("too little GPU time")
    assert [h["meets_target"] for h in rep["hours"]] == [None, False, True, True]
    assert client.get(url.format(chat.slug), {"range": "year"}).status_code == 422
    client.force_login(team_roles["outsider"])
    assert client.get(url.format(chat.slug)).status_code in (403, 404)
