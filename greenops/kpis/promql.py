"""The PromQL the shipped Grafana dashboard runs, in one place.

dashboards/grafana/greenops.json is generated from PANELS (`python -m greenops.kpis.grafana`)
and tests/kpis/test_prometheus.py runs these same expressions against a real Prometheus that
scraped /api/v1/teams/{slug}/metrics, comparing each with the KPI API's figure for the window.
`$team`, `$workload` and `$__range` are Grafana's variables; the test substitutes them.

Each entry: (panel title, unit for Grafana, KPI API key it must equal, expression). The KPI
key is read from the KPI API's "current" block; `scale` converts its unit to the panel's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str  # Grafana unit id
    kpi: str  # key in the KPI API's "current" block
    scale: float  # panel value = KPI value x scale
    per_workload: bool  # the KPI API is asked for the workload ($workload)
    expr: str


T = 'team="$team"'
W = 'team="$team", workload="$workload"'

PANELS: tuple[Panel, ...] = (
    Panel("GPU energy", "joule", "gpu_energy_kwh", 3.6e6, False,
          f"sum(increase(greenops_gpu_energy_joules_total{{{T}}}[$__range]))"),
    Panel("IT energy (GPU + CPU + RAM)", "joule", "energy_kwh", 3.6e6, False,
          f"sum(increase(greenops_it_energy_joules_total{{{T}}}[$__range]))"),
    Panel("Facility energy (IT x PUE)", "joule", "facility_energy_kwh", 3.6e6, False,
          f"sum(increase(greenops_facility_energy_joules_total{{{T}}}[$__range]))"),
    Panel("CO2e", "massg", "co2e_kg", 1000.0, False,
          f"sum(increase(greenops_co2e_grams_total{{{T}}}[$__range]))"),
    Panel("Cost (priced hours)", "currencyUSD", "cost_usd", 1.0, False,
          f"sum(increase(greenops_cost_usd_total{{{T}}}[$__range]))"),
    Panel("Inferences", "short", "requests", 1.0, False,
          f"sum(increase(greenops_inferences_total{{{T}}}[$__range]))"),
    Panel("Energy per inference", "joule", "energy_per_inference_j", 1.0, False,
          f"sum(increase(greenops_inference_energy_joules_total{{{T}}}[$__range]))"
          f" / sum(increase(greenops_inferences_total{{{T}}}[$__range]))"),
    Panel("Cost per inference", "currencyUSD", "cost_per_1k_inferences_usd", 1e-3, False,
          f"sum(increase(greenops_inference_cost_usd_total{{{T}}}[$__range]))"
          f" / sum(increase(greenops_inferences_total{{{T}}}[$__range]))"),
    Panel("p99 latency", "s", "latency_p99_ms", 1e-3, False,
          "histogram_quantile(0.99, sum by (le) (increase("
          f"greenops_inference_latency_seconds_bucket{{{T}}}[$__range])))"),
    Panel("Workload energy per inference", "joule", "energy_per_inference_j", 1.0, True,
          f"sum(increase(greenops_workload_it_energy_joules_total{{{W}}}[$__range]))"
          f" / sum(increase(greenops_workload_inferences_total{{{W}}}[$__range]))"),
    Panel("Workload p99 latency", "s", "latency_p99_ms", 1e-3, True,
          "histogram_quantile(0.99, sum by (le) (increase("
          f"greenops_workload_inference_latency_seconds_bucket{{{W}}}[$__range])))"),
)

# Live gauges (no KPI window to compare with; the test checks them against the minute rollup).
GAUGES: tuple[Panel, ...] = (
    Panel("GPU power now", "watt", "", 1.0, False,
          f"sum by (host, gpu) (greenops_gpu_power_watts{{{T}}})"),
    Panel("GPU utilisation now", "percentunit", "", 1.0, False,
          f"avg by (host, gpu) (greenops_gpu_utilization_ratio{{{T}}})"),
)


def bind(expr: str, *, team: str, window: str, workload: str = "") -> str:
    """An expression with Grafana's variables replaced, as the test sends it."""
    return (expr.replace("$__range", window).replace("$team", team)
            .replace("$workload", workload))
