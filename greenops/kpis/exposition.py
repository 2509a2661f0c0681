"""A team's figures in the Prometheus text format (GET /api/v1/teams/{slug}/metrics).

Written with prometheus_client: one Collector per scrape, built from the same KPI rollups the
KPI API reads, so `increase(counter[window])` in Prometheus and the KPI API agree.

- Counters are running totals of every stored hour (whole days from day rows, which are the
  exact merge of their hours): energy in joules (GPU, IT = GPU + CPU + RAM, facility = IT x
  PUE), CO2e in grams, cost in USD, inferences, and the energy and cost of the GPUs serving
  inference, so joules and USD per inference are a ratio of two increases.
- A counter moves when its hour is rolled up (the KPI beat task, a few minutes), so
  `increase(x[w])` counts what was measured and rolled up in w. An hour that is recomputed
  lower (a price corrected downwards) reads as a counter reset.
- Latency is a histogram in seconds with the sources' own bucket bounds, so
  `histogram_quantile(0.99, …)` is the KPI API's p99 (greenops.kpis.histogram follows it).
- Gauges: each GPU's mean power (W) and utilisation (ratio) over its newest minute, only when
  that minute is recent (a silent GPU has no value, never 0).
- Cost counts only priced hours; `greenops_unpriced_hours_total` counts the others, so a
  dashboard can say the cost is incomplete rather than show a partial sum as the cost.

Labels are team, workload, host, gpu (index) and model (the GPU's model name): one series
per GPU of the team and per workload, never per request, pod or process.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from greenops import windows
from greenops.kpis import histogram, metrics
from greenops.kpis.models import KpiRollup, Period
from greenops.kpis.queries import rows_by_day
from greenops.teams.models import Team
from greenops.telemetry.models import Gpu, GpuMinute
from greenops.workloads.models import Workload

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# A GPU's newest minute older than this is not "now": its gauges are left out.
GAUGE_FRESH = dt.timedelta(minutes=5)
# Bounded cardinality: at most this many workloads and GPUs of a team get series (the newest
# workloads and the lowest host/index GPUs beyond it are cut, and a gauge says how many).
MAX_WORKLOADS = 200
MAX_GPUS = 5000


def _rows(team: Team, workload: Workload | None, first: dt.datetime,
          end: dt.datetime) -> list[KpiRollup]:
    return rows_by_day(team, workload, first, end)


def _known_cost(rows: list[KpiRollup]) -> float:
    return float(sum(r.cost_usd for r in rows if r.cost_usd is not None))


def _latency(name: str, doc: dict, labels: list[str], values: list[str],
             sum_ms: float) -> HistogramMetricFamily | None:
    h = histogram.parse(doc)
    if not h.le_ms:
        return None
    fam = HistogramMetricFamily(name, "Inference latency (sources' own bucket bounds)",
                                labels=labels, unit="seconds")
    buckets = [(_le(le_ms / 1000.0), float(c)) for le_ms, c in zip(h.le_ms, h.cumulative,
                                                                  strict=False)]
    buckets.append(("+Inf", float(h.cumulative[-1])))
    fam.add_metric(values, buckets, sum_ms / 1000.0)
    return fam


def _le(seconds: float) -> str:
    return format(float(seconds), ".12g")


class TeamCollector:
    """prometheus_client custom collector: `collect()` yields the team's metric families."""

    def __init__(self, team: Team, now: dt.datetime | None = None) -> None:
        self.team = team
        self.now = now or timezone.now()

    def describe(self) -> list:
        return []  # unchecked collector: families are known only after reading the rows

    def collect(self) -> Iterator[Metric]:
        team = self.team
        first = (KpiRollup.objects.filter(team=team, period=Period.HOUR)
                 .order_by("bucket").values_list("bucket", flat=True).first())
        yield from self._gauges()
        if first is None:
            return
        start = windows.floor_day(first)
        end = windows.floor_hour(self.now) + 2 * windows.HOUR  # the current hour included
        t = [team.slug]
        rows = _rows(team, None, start, end)
        tot = metrics.merge(rows)
        cost = _known_cost(rows)
        # Counted on hour rows (a day row stands for up to 24 of them).
        hours = KpiRollup.objects.filter(team=team, workload__isnull=True, period=Period.HOUR)
        unpriced = hours.filter(cost_usd__isnull=True).count()
        simulated = hours.filter(simulated=True).count()
        inf_rows = [metrics._inference_figures(r) for r in rows]
        inf_cost = sum(c for _, _, c in inf_rows if c is not None)
        for name, doc, value in (
            ("greenops_gpu_energy_joules", "GPU energy (NVML or DCGM)", tot.gpu_energy_j),
            ("greenops_it_energy_joules", "IT energy: GPU + CPU + RAM", tot.energy_j),
            ("greenops_facility_energy_joules", "Facility energy: IT energy x PUE",
             tot.facility_energy_j),
            ("greenops_co2e_grams", "CO2e of the facility energy", tot.co2e_g),
            ("greenops_cost_usd", "Cost of the priced hours", cost),
            ("greenops_unpriced_hours", "Hours whose cost is unknown (no price)", unpriced),
            ("greenops_inferences", "Inferences counted", tot.requests),
            ("greenops_inference_energy_joules", "IT energy of the GPUs serving inference",
             sum(e for e, _, _ in inf_rows)),
            ("greenops_inference_cost_usd", "Cost of the GPUs serving inference (priced hours)",
             inf_cost),
            ("greenops_simulated_hours", "Hours holding simulated samples", simulated),
        ):
            fam = CounterMetricFamily(name, doc, labels=["team"])
            fam.add_metric(t, float(value))
            yield fam
        lat = _latency("greenops_inference_latency", tot.latency_buckets, ["team"], t,
                       tot.latency_sum_ms)
        if lat is not None:
            yield lat
        yield from self._workloads(start, end)

    def _workloads(self, start: dt.datetime, end: dt.datetime) -> Iterator[Metric]:
        team = self.team
        families = {
            "greenops_workload_gpu_energy_joules": "GPU energy of a workload's GPUs",
            "greenops_workload_it_energy_joules": "IT energy of a workload's GPUs and hosts' "
                                                  "CPU/RAM share",
            "greenops_workload_co2e_grams": "CO2e of a workload",
            "greenops_workload_cost_usd": "Cost of a workload (priced hours)",
            "greenops_workload_inferences": "Inferences of a workload",
        }
        fams = {n: CounterMetricFamily(n, d, labels=["team", "workload"])
                for n, d in families.items()}
        latencies = []
        workloads = list(Workload.objects.filter(team=team).order_by("id")[:MAX_WORKLOADS])
        for w in workloads:
            rows = _rows(team, w, start, end)
            if not rows:
                continue
            tot = metrics.merge(rows)
            cost = _known_cost(rows)
            v = [team.slug, w.slug]
            fams["greenops_workload_gpu_energy_joules"].add_metric(v, tot.gpu_energy_j)
            fams["greenops_workload_it_energy_joules"].add_metric(v, tot.energy_j)
            fams["greenops_workload_co2e_grams"].add_metric(v, tot.co2e_g)
            fams["greenops_workload_cost_usd"].add_metric(v, cost)
            fams["greenops_workload_inferences"].add_metric(v, float(tot.requests))
            lat = _latency("greenops_workload_inference_latency", tot.latency_buckets,
                           ["team", "workload"], v, tot.latency_sum_ms)
            if lat is not None:
                latencies.append(lat)
        yield from fams.values()
        yield from latencies

    def _gauges(self) -> Iterator[Metric]:
        team = self.team
        labels = ["team", "host", "gpu", "model"]
        power = GaugeMetricFamily("greenops_gpu_power_watts",
                                  "Mean GPU power over its newest minute", labels=labels)
        util = GaugeMetricFamily("greenops_gpu_utilization_ratio",
                                 "Mean GPU utilisation over its newest minute (0-1)",
                                 labels=labels)
        gpus = {g.id: g for g in Gpu.objects.filter(host__team=team, host__removed_at__isnull=True)
                .select_related("host").order_by("host__name", "index")[:MAX_GPUS]}
        since = self.now - GAUGE_FRESH
        newest: dict[int, GpuMinute] = {}
        # At most GAUGE_FRESH worth of minute rows per GPU; the last one read is the newest.
        for m in GpuMinute.objects.filter(gpu_id__in=list(gpus), bucket__gte=since,
                                          bucket__lte=self.now).order_by("bucket"):
            newest[m.gpu_id] = m
        for gpu_id, m in newest.items():
            g = gpus[gpu_id]
            v = [team.slug, g.host.name, str(g.index), g.name or "unknown"]
            if m.power_n:
                power.add_metric(v, m.power_sum_w / m.power_n)
            if m.util_n:
                util.add_metric(v, m.util_sum / m.util_n / 100.0)
        yield power
        yield util


def exposition(team: Team, now: dt.datetime | None = None) -> bytes:
    """The team's metrics in the Prometheus text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TeamCollector(team, now))
    return generate_latest(registry)
