"""Measuring a set of GPUs and inference counts over a window, from rollups only.

The KPIs compose the three owners and add nothing of their own:
  energy  greenops.energy.it_energy            GPU + linked share of each host's CPU/RAM
  carbon  greenops.carbon.accounting.carbon_of  PUE and intensity once per host and hour
  cost    greenops.costs.accounting.cost_of     the one cost model of every page
`Factors` carries the carbon and price lookups, so tests can pass stand-ins.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from greenops import windows
from greenops.carbon.accounting import (
    FactorsFor,
    SiteFactors,
    cached_site_factors,
    carbon_of,
)
from greenops.costs.accounting import PriceFor, cached_prices, cost_of
from greenops.costs.catalog import HourlyPrice
from greenops.energy import it_energy
from greenops.kpis import histogram, timings
from greenops.kpis.metrics import Totals
from greenops.kpis.models import InferenceWindow
from greenops.telemetry.models import Gpu

__all__ = ["Factors", "HourlyPrice", "SiteFactors", "add_inference", "cached_factors",
           "measure_gpus"]


@dataclass(frozen=True)
class Factors:
    site_factors: FactorsFor = field(default_factory=cached_site_factors)
    price: PriceFor = field(default_factory=cached_prices)


def cached_factors() -> Factors:
    """Default factors that look each host's site factors and price up once: rebuilding many
    hours would otherwise repeat the same carbon and catalog queries for every hour."""
    return Factors()


def measure_gpus(gpus: list[Gpu], start: dt.datetime, end: dt.datetime,
                 factors: Factors | None = None) -> Totals:
    """Energy, carbon, cost and utilisation of these GPUs (and their hosts' CPU/RAM share)
    over [start, end)."""
    factors = factors or Factors()
    t = Totals()
    if not gpus:
        return t
    energy = it_energy(gpus, start, end)
    t.gpu_energy_j = energy.gpu_energy_j
    t.cpu_ram_energy_j = energy.cpu_ram_energy_j
    t.cpu_ram_method = energy.cpu_ram_method
    t.util_sum, t.util_n = energy.util_sum, energy.util_n
    t.gpu_minutes = energy.gpu_minutes
    t.simulated = energy.simulated
    carbon = carbon_of(energy, factors.site_factors)
    t.facility_energy_j, t.co2e_g = carbon.facility_energy_j, carbon.co2e_g
    t.pue_source, t.intensity_source = carbon.pue_source, carbon.intensity_source
    cost = cost_of(energy, factors.price)
    t.cost_usd, t.cost_source = cost.cost_usd, cost.source
    return t


def add_inference(t: Totals, workload_ids: list[int], start: dt.datetime,
                  end: dt.datetime) -> Totals:
    """Fold the inference windows ending in [start, end) into `t`. Reads only that window's
    raw deltas: this is the rollup step itself; pages then read KpiRollup."""
    rows = InferenceWindow.objects.filter(workload_id__in=workload_ids, end__gte=start,
                                          end__lt=end)
    hists, phases = [], [t.timings]
    spans: list[tuple[dt.datetime, dt.datetime]] = []
    unknown_span = False
    for w in rows.values_list("requests", "success", "failure", "tokens", "latency_sum_ms",
                              "latency_n", "latency_buckets", "prompt_tokens", "server_energy_j",
                              "timings", "start", "end").iterator(chunk_size=2000):
        (requests, success, failure, tokens, sum_ms, latency_n, buckets, prompt_tokens,
         server_energy_j, window_timings, w_start, w_end) = w
        if w_start is None:
            unknown_span = True
        else:
            spans.append((w_start, w_end))
        if prompt_tokens is not None:
            t.prompt_tokens = (t.prompt_tokens or 0) + prompt_tokens
        if server_energy_j is not None:
            t.server_energy_j = (t.server_energy_j or 0.0) + server_energy_j
        phases.append(window_timings)
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
    t.timings = timings.merge(phases)
    # Rates divide by the seconds the windows covered (overlaps, e.g. two replicas, once).
    if unknown_span or t.measured_s is None:
        t.measured_s = None
    else:
        t.measured_s += windows.union_seconds(spans)
    return t
