"""A real Prometheus scrapes a team's /metrics with a read token; its answers equal the KPI API.

The test starts Debian's `prometheus` (like PostgreSQL, a server the test runs; skipped with the
reason printed only where the binary is missing) on a free loopback port, with a temporary
config and storage, scraping the live server every second with `Authorization: Bearer gha_…`.

The team (one host A with GPUs A0 and A1, PUE 1.2, 300 g/kWh, $4/h; workload W serves
inference on A0) has two measured hours. Hour H1 is rolled up before Prometheus starts, H2
while it scrapes, so the counters step from the H1 totals to H1 + H2. Hand-computed, H2 is:

  GPU energy   A0 2,160,000 J + A1 1,440,000 J            = 3,600,000 J (1.0 kWh)
  CPU + RAM    180,000 + 36,000 J                          =   216,000 J
  IT energy    3,816,000 J;  facility x 1.2                = 4,579,200 J (1.272 kWh)
  CO2e         1.272 kWh x 300 g/kWh                       =     381.6 g
  Cost         host A ran the hour: $4 x 1 h               =       $4.00
  Inference    W: 1000 + 2000 + 600                        =     3,600 requests
  W's energy   A0 2,160,000 + half of A's CPU/RAM 108,000  = 2,268,000 J -> 630 J/inference
  W's cost     $4 x 1/2 (one of A's two GPUs)               = $2 -> $0.5556 per 1k inferences
  p99          3,000 at 10 ms, 600 at 100 ms: rank 3,564 lies in the bucket (89.13, 100] ms,
               564/600 of the way: 89.125 + 10.875 x 0.94 = 99.35 ms

Prometheus' `increase(x[w])` extrapolates to the window's edges unless samples sit on them, so
the window is set from the stored scrape times: from the first scrape (H1 totals) to the last
(H1 + H2), evaluated at the last. Then increase = last - first exactly, and it must equal the
KPI API's figure for H2 within 1 %. The expressions are greenops.kpis.promql.PANELS, the same
ones the Grafana dashboard JSON holds (tests/kpis/test_grafana.py checks that).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
from django.utils import timezone

from greenops.carbon.accounting import SiteFactors
from greenops.costs.catalog import HourlyPrice
from greenops.kpis import histogram, promql, rollup
from greenops.kpis.measure import Factors
from greenops.teams.models import ApiToken
from tests.support.factories import make_host

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
H1 = dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)
H2 = H1 + dt.timedelta(hours=1)
HOUR = dt.timedelta(hours=1)

pytestmark = pytest.mark.django_db(transaction=True)


def _factors() -> Factors:
    site = SiteFactors(1.2, "test site", 300.0, "test grid")
    price = HourlyPrice(4.0, "on_demand", "test price", None, False)
    return Factors(site_factors=lambda host, hour: site, price=lambda host, hour: price)


def _gpu_hour(gpu, hour, energy_j, util_pct):
    from greenops.telemetry.models import GpuHour, GpuMinute

    GpuHour.objects.create(gpu=gpu, bucket=hour, samples=60, util_sum=util_pct * 60, util_n=60,
                           energy_j=energy_j)
    GpuMinute.objects.bulk_create(
        GpuMinute(gpu=gpu, bucket=hour + dt.timedelta(minutes=m), samples=1, util_sum=util_pct,
                  util_n=1, energy_j=energy_j / 60) for m in range(60))


def _windows(workload, hour, requests, latencies):
    import uuid

    from greenops.kpis.models import InferenceBatch, InferenceWindow

    batch = InferenceBatch.objects.create(id=uuid.uuid4(), team=workload.team,
                                          windows=len(requests))
    chunks, at = [], 0
    for n in requests:
        chunks.append(latencies[at:at + n])
        at += n
    for i, (n, lat) in enumerate(zip(requests, chunks, strict=True)):
        InferenceWindow.objects.create(
            batch=batch, workload=workload, end=hour + dt.timedelta(minutes=10 * (i + 1)),
            start=hour + dt.timedelta(minutes=10 * i), requests=n, success=n, failure=0,
            latency_sum_ms=sum(lat), latency_n=n,
            latency_buckets=histogram.to_json(histogram.from_values(lat)))


def _scenario(team):
    from greenops.telemetry.models import HostEnergyHour
    from greenops.workloads.models import Workload

    host, _ = make_host(team, "A", gpus=2)
    a0, a1 = host.gpus.order_by("index")
    w = Workload.objects.create(team=team, name="Chat", slug="chat", kind="inference")
    w.gpus.add(a0)
    # H1: A0 1,800,000 J, A1 720,000 J, CPU 360,000 J; 500 requests at 20 ms.
    _gpu_hour(a0, H1, 1_800_000, 50.0)
    _gpu_hour(a1, H1, 720_000, 20.0)
    HostEnergyHour.objects.create(host=host, bucket=H1, cpu_energy_j=360_000, ram_energy_j=0,
                                  cpu_method="rapl", ram_method="constant", samples=60)
    _windows(w, H1, [500], [20.0] * 500)
    # H2: the hand-computed hour of the module docstring.
    _gpu_hour(a0, H2, 2_160_000, 60.0)
    _gpu_hour(a1, H2, 1_440_000, 40.0)
    HostEnergyHour.objects.create(host=host, bucket=H2, cpu_energy_j=180_000,
                                  ram_energy_j=36_000, cpu_method="rapl",
                                  ram_method="constant", samples=60)
    _windows(w, H2, [1000, 2000, 600], [10.0] * 3000 + [100.0] * 600)
    return host, w


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str | None = None) -> tuple[int, bytes]:
    # Loopback only: the live server and the Prometheus this test started.
    assert urllib.parse.urlsplit(url).hostname in ("127.0.0.1", "localhost")
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token
                                 else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Prom:
    def __init__(self, base: str) -> None:
        self.base = base

    def query(self, expr: str, at: float | None = None) -> list:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        status, body = _get(f"{self.base}/api/v1/query?{urllib.parse.urlencode(params)}")
        doc = json.loads(body)
        assert status == 200 and doc["status"] == "success", (expr, doc)
        return doc["data"]["result"]

    def samples(self, expr: str) -> list[tuple[float, float]]:
        result = self.query(expr)
        return [(float(t), float(v)) for t, v in result[0]["values"]] if result else []


@pytest.fixture
def prometheus(tmp_path):
    if not os.path.exists(PROMETHEUS):
        print(f"SKIP REASON: no prometheus binary at {PROMETHEUS} (apt-get install prometheus)")
        pytest.skip(f"no prometheus binary at {PROMETHEUS} (Debian package 'prometheus')")
    procs = []

    def start(target: str, metrics_path: str, token: str) -> Prom:
        (tmp_path / "token").write_text(token)
        (tmp_path / "prometheus.yml").write_text(json.dumps({
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
            "scrape_configs": [{
                "job_name": "greenops", "metrics_path": metrics_path,
                "authorization": {"type": "Bearer",
                                  "credentials_file": str(tmp_path / "token")},
                "static_configs": [{"targets": [target]}]}]}))
        port = _free_port()
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "w"))  # noqa: SIM115
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            if proc.poll() is not None:
                raise AssertionError((tmp_path / "prometheus.log").read_text())
            try:
                if _get(f"{base}/-/ready")[0] == 200:
                    return Prom(base)
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("prometheus did not become ready")

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


def _wait_for(prom: Prom, expr: str, ok, what: str, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = prom.samples(expr)
        if ok(got):
            return got
        time.sleep(0.5)
    raise AssertionError(f"waited {timeout_s} s for {what}; last {expr} = {got}")


def test_prometheus_increase_equals_the_kpi_api(live_server, team, prometheus):
    from greenops.telemetry.models import GpuMinute

    host, w = _scenario(team)
    factors = _factors()
    rollup.rebuild(team, H1, H1 + HOUR, factors)
    # A fresh minute for the power gauge: A0 drew 300 W at 62 % over the last minute.
    a0 = host.gpus.get(index=0)
    GpuMinute.objects.create(gpu=a0, bucket=timezone.now().replace(second=0, microsecond=0),
                             samples=1, power_sum_w=300.0, power_n=1, util_sum=62.0, util_n=1)
    _row, token = ApiToken.issue(team, "prometheus", scope="read")
    base = live_server.url.replace("localhost", "127.0.0.1")
    path = f"/api/v1/teams/{team.slug}/metrics"

    # The endpoint itself, as curl would see it.
    assert _get(base + path)[0] == 401
    status, body = _get(base + path, token)
    assert status == 200
    text = body.decode()
    assert "# TYPE greenops_gpu_energy_joules_total counter" in text
    print("NOTE curl /metrics (first lines):\n" + "\n".join(
        line for line in text.splitlines() if line.startswith("greenops_")))

    prom = prometheus(base.removeprefix("http://"), path, token)
    sel = f'greenops_gpu_energy_joules_total{{team="{team.slug}"}}[5m]'
    # H1 totals: 1,800,000 + 720,000 = 2,520,000 J, seen by at least three scrapes.
    _wait_for(prom, sel, lambda s: len(s) >= 3, "three scrapes of the H1 totals")
    rollup.rebuild(team, H2, H2 + HOUR, factors)
    samples = _wait_for(prom, sel, lambda s: len([v for _, v in s if v > 2_520_001]) >= 3,
                        "three scrapes of the H1 + H2 totals")
    (t_a, first), (t_b, last) = samples[0], samples[-1]
    assert first == pytest.approx(2_520_000) and last == pytest.approx(2_520_000 + 3_600_000)
    window = f"{round(t_b * 1000) - round(t_a * 1000)}ms"
    print(f"NOTE scrapes {len(samples)}, window {window} ending {t_b:.3f}")

    def kpi(workload: str = "") -> dict:
        q = {"start": H2.isoformat(), "end": (H2 + HOUR).isoformat()}
        if workload:
            q["workload"] = workload
        status, body = _get(f"{base}/api/v1/teams/{team.slug}/kpis?"
                            f"{urllib.parse.urlencode(q)}", token)
        assert status == 200, body
        current = json.loads(body)["current"]
        print(f"NOTE curl -H 'Authorization: Bearer gha_…' '{base}/api/v1/teams/{team.slug}/"
              f"kpis?{urllib.parse.urlencode(q)}'\n     -> " + json.dumps(
                  {k: current[k] for k in ("gpu_energy_kwh", "energy_kwh", "facility_energy_kwh",
                                           "co2e_kg", "cost_usd", "requests",
                                           "energy_per_inference_j",
                                           "cost_per_1k_inferences_usd", "latency_p99_ms")}))
        return current

    team_kpi, wl_kpi = kpi(), kpi(w.slug)
    # The KPI API against the hand-computed hour first (module docstring).
    assert team_kpi["gpu_energy_kwh"] == pytest.approx(1.0)
    assert team_kpi["energy_kwh"] == pytest.approx(3_816_000 / 3.6e6)
    assert team_kpi["facility_energy_kwh"] == pytest.approx(1.272)
    assert team_kpi["co2e_kg"] == pytest.approx(0.3816)
    assert team_kpi["cost_usd"] == pytest.approx(4.0)
    assert team_kpi["requests"] == 3600
    assert wl_kpi["energy_per_inference_j"] == pytest.approx(630.0)
    assert team_kpi["energy_per_inference_j"] == pytest.approx(630.0)
    assert team_kpi["cost_per_1k_inferences_usd"] == pytest.approx(2.0 / 3.6)
    assert team_kpi["latency_p99_ms"] == pytest.approx(99.35, abs=0.01)

    for panel in promql.PANELS:
        expr = promql.bind(panel.expr, team=team.slug, window=window, workload=w.slug)
        result = prom.query(expr, at=t_b)
        print(f"NOTE GET {prom.base}/api/v1/query?query=<expr>&time={t_b:.3f}")
        assert len(result) == 1, (panel.title, expr, result)
        got = float(result[0]["value"][1])
        want = (wl_kpi if panel.per_workload else team_kpi)[panel.kpi] * panel.scale
        print(f"NOTE PromQL {expr}\n     = {got:.6g}   KPI API {panel.kpi} x {panel.scale:g} "
              f"= {want:.6g}")
        assert got == pytest.approx(want, rel=0.01), (panel.title, expr, got, want)

    # The live gauges: A0's newest minute (300 W, 62 %); A1 has no fresh minute, so no value.
    power = prom.query(promql.bind(promql.GAUGES[0].expr, team=team.slug, window=window))
    assert [(r["metric"]["gpu"], float(r["value"][1])) for r in power] == [("0", 300.0)]
    util = prom.query(promql.bind(promql.GAUGES[1].expr, team=team.slug, window=window))
    assert [(r["metric"]["gpu"], float(r["value"][1])) for r in util] == [("0", 0.62)]
