"""KPI test helpers: the measure scenario (hosts A and B, stand-in factors and prices),
GPU hours, host energy and inference windows."""

from __future__ import annotations

import datetime as dt
import uuid

from greenops.kpis.measure import Factors, HourlyPrice, SiteFactors
from tests.support.factories import make_host

H = dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)
PRICES = {"A": HourlyPrice(8.0, "on_demand", "test price A", None, False),
          "B": HourlyPrice(2.0, "on_demand", "test price B", None, False)}
FACTORS = {"A": SiteFactors(1.5, "site A", 400.0, "test table: A"),
           "B": SiteFactors(1.1, "site B", 100.0, "test table: B")}


def stand_in_factors(prices=PRICES) -> Factors:
    return Factors(site_factors=lambda host, hour: FACTORS[host.name],
                   price=lambda host, hour: prices.get(host.name))


def add_gpu_hour(gpu, hour, energy_j, util_pct, minutes, simulated=False):
    from greenops.telemetry.models import GpuHour, GpuMinute

    GpuHour.objects.create(gpu=gpu, bucket=hour, samples=minutes, util_sum=util_pct * minutes,
                           util_n=minutes, energy_j=energy_j,
                           simulated_samples=minutes if simulated else 0)
    for m in range(minutes):
        GpuMinute.objects.create(gpu=gpu, bucket=hour + dt.timedelta(minutes=m), samples=1,
                                 util_sum=util_pct, util_n=1, energy_j=energy_j / minutes,
                                 simulated_samples=1 if simulated else 0)


def add_windows(workload, hour, requests=(1000, 2000, 635), latencies=None, with_start=False):
    """Windows ending 10, 20, 30 ... minutes into `hour`; with_start: each began 10 minutes
    before its end (the agent's previous scrape), so together they measured 10 min each."""
    from greenops.kpis import histogram
    from greenops.kpis.models import InferenceBatch, InferenceWindow

    batch = InferenceBatch.objects.create(id=uuid.uuid4(), team=workload.team,
                                          windows=len(requests))
    for i, n in enumerate(requests):
        InferenceWindow.objects.create(
            batch=batch, workload=workload, end=hour + dt.timedelta(minutes=10 * (i + 1)),
            start=hour + dt.timedelta(minutes=10 * i) if with_start else None,
            requests=n, success=n, failure=0,
            latency_buckets=histogram.to_json(histogram.from_values(latencies or [])))
    return batch


def build_scenario(team) -> dict:
    """The scenario in this module's docstring; other KPI tests build it too."""
    from greenops.workloads.models import Workload

    host_a, _ = make_host(team, "A", gpus=2)
    host_b, _ = make_host(team, "B", gpus=1)
    a0, a1 = host_a.gpus.order_by("index")
    (b0,) = host_b.gpus.all()
    add_gpu_hour(a0, H, 1_800_000, 50.0, 60)
    add_gpu_hour(a1, H, 3_600_000, 90.0, 60)
    add_gpu_hour(b0, H, 720_000, 20.0, 30)
    add_host_energy(host_a, H, 360_000, 72_000)
    add_host_energy(host_b, H, 180_000, 0)
    w = Workload.objects.create(team=team, name="Ranker", kind="inference")
    w.gpus.add(a0)
    w.hosts.add(host_b)
    return {"workload": w, "a": host_a, "b": host_b, "a0": a0, "a1": a1, "b0": b0}


def add_host_energy(host, hour, cpu_j, ram_j):
    from greenops.telemetry.models import HostEnergyHour

    HostEnergyHour.objects.create(host=host, bucket=hour, cpu_energy_j=cpu_j, ram_energy_j=ram_j,
                                  cpu_method="rapl", ram_method="constant", samples=60)
