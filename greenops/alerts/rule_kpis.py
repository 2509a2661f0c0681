"""What a rule can watch: the KPIs (label, unit, which sources matter) and the windows it can
look over. Plain definitions with no database access, so the models can name units and the
choices without loading the KPI engine (greenops.alerts.kpi_values computes the values)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass


@dataclass(frozen=True)
class Kpi:
    label: str
    unit: str
    group: str  # inference | gpu | energy | carbon | cost: decides which sources matter
    per_inference: bool = False  # needs inference counts: team or workload scope only


KPIS: dict[str, Kpi] = {
    "energy_per_inference_j": Kpi("Energy per inference", "J", "energy", True),
    "cost_per_1k_inferences_usd": Kpi("Cost per 1k inferences", "USD", "cost", True),
    "gpu_util_pct": Kpi("GPU utilisation", "%", "gpu"),
    "idle_gpu_hours": Kpi("Idle GPU-hours", "GPU-h", "gpu"),
    "idle_cost_usd": Kpi("Idle GPU cost", "USD", "cost"),
    "latency_p99_ms": Kpi("p99 latency", "ms", "inference", True),
    "throughput_per_s": Kpi("Throughput", "inferences/s", "inference", True),
    "energy_kwh": Kpi("IT energy", "kWh", "energy"),
    "co2e_kg": Kpi("Carbon", "kg CO2e", "carbon"),
    "cost_usd": Kpi("Spend", "USD", "cost"),
}
BUDGET_KPIS = ("cost_usd", "co2e_kg")

# Rolling windows end at the last whole hour: the current hour's rollup is still filling, and
# a below-threshold rule on a half-measured hour would fire every morning at :05.
WINDOWS: dict[str, tuple[str, dt.timedelta | None]] = {
    "1h": ("last whole hour", dt.timedelta(hours=1)),
    "6h": ("last 6 whole hours", dt.timedelta(hours=6)),
    "24h": ("last 24 whole hours", dt.timedelta(hours=24)),
    "7d": ("last 7 days", dt.timedelta(days=7)),
    "day": ("today so far (team time zone)", None),
    "month": ("this calendar month so far (team time zone)", None),
}
