"""Measuring a set of GPUs and inference counts over a window, from rollups only.

Energy attributed to a workload is the energy of the GPUs linked to it in the window, plus the
linked share of each host's CPU and RAM energy (the workload's GPUs on that host / all the
host's GPUs). PUE and grid intensity are applied once per host (greenops.carbon.accounting),
then summed, so a workload spread over sites gets each site's factors.

Dependencies on the carbon and costs apps come in through `Factors`, so tests can pass
stand-ins and the KPI code works before those apps have data.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.db.models import Count, Max, Sum

from greenops.carbon.accounting import SiteFactors, carbon_for_energy, site_factors
from greenops.kpis import histogram
from greenops.kpis.metrics import J_PER_KWH, Totals
from greenops.kpis.models import InferenceWindow
from greenops.telemetry.models import Gpu, GpuHour, GpuMinute, Host

HOUR = dt.timedelta(hours=1)


@dataclass(frozen=True)
class Price:
    usd_per_hour: float
    source: str


def default_site_factors(host: Host) -> SiteFactors:
    return site_factors(host)


def default_price(host: Host) -> Price | None:
    """The host's hourly price from the costs app's catalog; None means "no price"."""
    try:
        from greenops.costs.catalog import hourly_price
    except ImportError:  # the costs app is optional for KPIs
        return None
    found = hourly_price(host)
    if found is None:
        return None
    stale = " (stale)" if getattr(found, "stale", False) else ""
    return Price(float(found.usd_per_hour), f"{found.source}{stale}")


@dataclass(frozen=True)
class Factors:
    site_factors: Callable[[Host], SiteFactors] = default_site_factors
    price: Callable[[Host], Price | None] = default_price


def cached_factors() -> Factors:
    """Default factors that look each host's site factors and price up once: rebuilding many
    hours would otherwise repeat the same carbon and catalog queries for every hour."""
    sites: dict[int, SiteFactors] = {}
    prices: dict[int, Price | None] = {}

    def site(host: Host) -> SiteFactors:
        if host.id not in sites:
            sites[host.id] = default_site_factors(host)
        return sites[host.id]

    def price(host: Host) -> Price | None:
        if host.id not in prices:
            prices[host.id] = default_price(host)
        return prices[host.id]

    return Factors(site, price)


def _host_energy_hours(host_ids: Iterable[int], start: dt.datetime, end: dt.datetime):
    """(host_id, bucket, cpu_j, ram_j, methods) rows; empty when the carbon app has none."""
    try:
        from greenops.carbon.models import HostEnergyHour
    except ImportError:
        return []
    first = start.replace(minute=0, second=0, microsecond=0)
    return HostEnergyHour.objects.filter(
        host_id__in=list(host_ids), bucket__gte=first, bucket__lt=end
    ).values_list("host_id", "bucket", "cpu_energy_j", "ram_energy_j", "cpu_method",
                  "ram_method", "simulated_samples")


def _overlap(bucket: dt.datetime, start: dt.datetime, end: dt.datetime) -> float:
    """Fraction of the hour starting at `bucket` that lies inside [start, end)."""
    lo, hi = max(bucket, start), min(bucket + HOUR, end)
    return max(0.0, (hi - lo).total_seconds()) / HOUR.total_seconds()


def measure_gpus(gpus: list[Gpu], start: dt.datetime, end: dt.datetime,
                 factors: Factors | None = None) -> Totals:
    """Energy, carbon, cost and utilisation of these GPUs (and their hosts' CPU/RAM share)
    over [start, end). Hour-aligned windows read hour rollups, others minute rollups."""
    factors = factors or Factors()
    t = Totals()
    if not gpus:
        return t
    gpu_host = {g.id: g.host for g in gpus}
    aligned = start.minute == start.second == end.minute == end.second == 0 and \
        start.microsecond == end.microsecond == 0
    model = GpuHour if aligned else GpuMinute
    per_gpu = (
        model.objects.filter(gpu_id__in=list(gpu_host), bucket__gte=start, bucket__lt=end)
        .values("gpu_id")
        .annotate(e=Sum("energy_j"), us=Sum("util_sum"), un=Sum("util_n"),
                  sim=Max("simulated_samples"))
    )
    minutes = dict(
        GpuMinute.objects.filter(gpu_id__in=list(gpu_host), bucket__gte=start, bucket__lt=end)
        .values("gpu_id").annotate(n=Count("*")).values_list("gpu_id", "n")
    )
    it_j: dict[int, float] = defaultdict(float)  # per host
    hosts: dict[int, Host] = {h.id: h for h in gpu_host.values()}
    for r in per_gpu:
        host = gpu_host[r["gpu_id"]]
        t.gpu_energy_j += r["e"] or 0.0
        it_j[host.id] += r["e"] or 0.0
        t.util_sum += r["us"] or 0.0
        t.util_n += r["un"] or 0
        t.simulated = t.simulated or bool(r["sim"])
    # CPU and RAM: the share of each host that these GPUs represent.
    linked = defaultdict(int)
    for g in gpus:
        linked[g.host_id] += 1
    host_gpu_count = dict(
        Gpu.objects.filter(host_id__in=list(hosts)).values("host_id").annotate(n=Count("*"))
        .values_list("host_id", "n")
    )
    methods = []
    for host_id, bucket, cpu_j, ram_j, cpu_m, ram_m, sim in _host_energy_hours(hosts, start, end):
        share = linked[host_id] / max(host_gpu_count.get(host_id, 1), 1)
        j = ((cpu_j or 0.0) + (ram_j or 0.0)) * share * _overlap(bucket, start, end)
        t.cpu_ram_energy_j += j
        it_j[host_id] += j
        t.simulated = t.simulated or bool(sim)
        methods.append(f"CPU {cpu_m}, RAM {ram_m}")
    t.cpu_ram_method = "; ".join(sorted(set(methods)))
    # PUE and intensity: once per host, on that host's IT energy.
    pue_sources, intensity_sources = [], []
    for host_id, energy_j in sorted(it_j.items()):
        if not energy_j:
            continue
        f = factors.site_factors(hosts[host_id])
        carbon = carbon_for_energy(energy_j, f)  # the one place PUE and intensity are applied
        t.facility_energy_j += carbon.facility_energy_kwh * J_PER_KWH
        t.co2e_g += carbon.co2e_g
        pue_sources.append(f"{f.pue:g} ({f.pue_source})")
        intensity_sources.append(f"{f.intensity_g_per_kwh:g} g/kWh ({f.intensity_source})")
    t.pue_source = "; ".join(dict.fromkeys(pue_sources))
    t.intensity_source = "; ".join(dict.fromkeys(intensity_sources))
    # Cost: each GPU-minute observed costs the host's hourly price / its GPU count / 60.
    cost, cost_sources, missing = 0.0, [], []
    for gpu_id, n in minutes.items():
        t.gpu_minutes += n
        host = gpu_host[gpu_id]
        price = factors.price(host)
        if price is None:
            missing.append(host.name)
            continue
        cost += price.usd_per_hour / max(host_gpu_count.get(host.id, 1), 1) * n / 60
        cost_sources.append(price.source)
    if missing:
        t.cost_usd = None
        t.cost_source = "no price for " + ", ".join(sorted(set(missing)))
    else:
        t.cost_usd = cost
        t.cost_source = "; ".join(dict.fromkeys(cost_sources))
    return t


def add_inference(t: Totals, workload_ids: list[int], start: dt.datetime,
                  end: dt.datetime) -> Totals:
    """Fold the inference windows ending in [start, end) into `t`. Reads only that window's
    raw deltas: this is the rollup step itself; pages then read KpiRollup."""
    rows = InferenceWindow.objects.filter(workload_id__in=workload_ids, end__gte=start,
                                          end__lt=end)
    hists = []
    for w in rows.values_list("requests", "success", "failure", "tokens", "latency_sum_ms",
                              "latency_n", "latency_buckets").iterator(chunk_size=2000):
        requests, success, failure, tokens, sum_ms, latency_n, buckets = w
        t.requests += requests
        t.success += success or 0
        t.failure += failure or 0
        if tokens is not None:
            t.tokens = (t.tokens or 0) + tokens
            t.token_requests += requests
        t.latency_sum_ms += sum_ms or 0.0
        t.latency_n += latency_n
        hists.append(buckets)
    t.latency_buckets = histogram.merge([t.latency_buckets, *hists])
    return t
