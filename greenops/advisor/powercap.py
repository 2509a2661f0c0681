"""Power- and thermal-throttling, and what the power cap trades: measured where the workload
ran under two enforced limits (hours in the range, or a marked variant pair), else the
published curve, labelled so."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Max, Min
from django.db.models.functions import TruncHour

from collectors.bench_gate import mann_whitney_u, smallest_p
from greenops import windows
from greenops.advisor import gpus as gpu_table
from greenops.advisor import variants
from greenops.advisor.measure import (
    MIN_CAP_HOURS,
    NEAR_FULL_UTIL_PCT,
    POWER_CAPPED_SHARE,
    PUBLISHED_CAP_ENERGY_CHANGE,
    PUBLISHED_CAP_SHARE,
    PUBLISHED_CAP_SOURCE,
    THERMAL_SHARE,
    Diagnosis,
    Effect,
    Monthly,
    Profile,
    estimate_confidence,
    own_limit,
    scaled_effect,
)
from greenops.advisor.models import VariantPair
from greenops.advisor.variants import ALPHA
from greenops.kpis import metrics, queries
from greenops.kpis.models import Period
from greenops.telemetry.models import GpuMinute
from greenops.workloads.models import Workload


@dataclass(frozen=True)
class CapSide:
    limit_w: float
    hours: int
    energy_per_inference_j: float | None
    throughput_per_s: float | None
    util_pct: float | None
    latency_p99_ms: float | None


@dataclass(frozen=True)
class Tradeoff:
    """Two power limits the workload measurably ran under, low first."""

    low: CapSide
    high: CapSide
    source: str  # "hours in the range" or "variant pair '...'"
    p_value: float | None  # energy per inference, Mann-Whitney U over hourly values
    verdict: str

    @property
    def energy_change(self) -> float | None:
        lo, hi = self.low.energy_per_inference_j, self.high.energy_per_inference_j
        return lo / hi - 1 if lo is not None and hi else None

    @property
    def throughput_change(self) -> float | None:
        lo, hi = self.low.throughput_per_s, self.high.throughput_per_s
        return lo / hi - 1 if lo is not None and hi else None


def _cap_side(limit: float, rows: list) -> tuple[CapSide, list[float]]:
    k = metrics.derive(metrics.merge(rows), len(rows) * 3600.0)
    hourly = [h["energy_per_inference_j"] for h in
              (metrics.derive(metrics.merge([r]), 3600.0) for r in rows)
              if h["energy_per_inference_j"] is not None]
    return CapSide(limit, len(rows), k["energy_per_inference_j"], k["throughput_per_s"],
                   k["gpu_util_pct"], k["latency_p99_ms"]), hourly


def _noise(xa: list[float], xb: list[float]) -> tuple[float | None, str]:
    if not xa or not xb or smallest_p(len(xa), len(xb)) >= ALPHA:
        return None, f"too few hours ({len(xa)} and {len(xb)}) for p < {ALPHA:g}"
    pv = mann_whitney_u(xa, xb).p_value
    return pv, ("beyond noise" if pv < ALPHA else "within noise") + f" (p = {pv:.3g})"


def cap_tradeoff(workload: Workload, window: windows.Window) -> Tradeoff | None:
    """The hours of the range spent wholly under one enforced power limit (every reporting
    minute of every GPU at the same limit), grouped by limit; with at least MIN_CAP_HOURS hours
    that counted inferences under each of two limits, the lowest and highest limits' KPIs."""
    gpu_ids = list(workload.gpu_queryset().values_list("id", flat=True))
    hours = (GpuMinute.objects.filter(gpu_id__in=gpu_ids, bucket__gte=window.start,
                                      bucket__lt=window.end, samples__gt=0)
             .annotate(h=TruncHour("bucket")).values("h")
             .annotate(lo=Min("power_limit_min_w"), hi=Max("power_limit_min_w"),
                       n=Count("bucket"), reported=Count("power_limit_min_w")))
    limit_of = {r["h"]: r["lo"] for r in hours
                if r["lo"] is not None and r["lo"] == r["hi"] and r["reported"] == r["n"]}
    groups: dict[float, list] = {}
    for row in queries.rows(workload.team, workload, Period.HOUR, window.start, window.end):
        limit = limit_of.get(row.bucket)
        if limit is not None and row.requests:
            groups.setdefault(limit, []).append(row)
    usable = sorted(lim for lim, rows in groups.items() if len(rows) >= MIN_CAP_HOURS)
    if len(usable) < 2:
        return None
    low, xl = _cap_side(usable[0], groups[usable[0]])
    high, xh = _cap_side(usable[-1], groups[usable[-1]])
    p_value, verdict = _noise(xl, xh)
    return Tradeoff(low, high, "hours in this range", p_value, verdict)


def pair_tradeoff(workload: Workload, default: windows.Window) -> Tradeoff | None:
    """A marked variant pair of this workload with itself over two periods whose GPUs ran
    under different power limits: the pair's measured comparison."""
    for pair in VariantPair.objects.filter(team=workload.team, a_workload=workload,
                                           b_workload=workload).order_by("-created_at"):
        a, b = variants.pair_sides(pair, default)
        c = variants.compare(workload.team, a, b)
        if not c.power_caps_differ:
            continue
        lines = {line.key: line for line in c.lines}
        sides = []
        for i, side_limits in enumerate(c.power_limits):
            if side_limits[0] != side_limits[1]:
                break  # a side that changed its limit inside its period measures neither
            got = {key: (line.a if i == 0 else line.b) for key, line in lines.items()}
            sides.append(CapSide(side_limits[0], lines["energy_per_inference_j"].hours[i],
                                 got["energy_per_inference_j"], got["throughput_per_s"],
                                 got["gpu_util_pct"], got["latency_p99_ms"]))
        if len(sides) != 2:
            continue
        e = lines["energy_per_inference_j"]
        low, high = sorted(sides, key=lambda s: s.limit_w)
        return Tradeoff(low, high, f"variant pair '{pair.label}'", e.p_value,
                        f"{e.verdict} ({e.reason})")
    return None


def _tradeoff_effect(t: Tradeoff, m: Monthly) -> tuple[Effect, list[str]]:
    """Running the month's measured inferences at the cap with the lower energy per inference
    instead of the other one."""
    change = t.energy_change
    if change is None or not m.month_inferences:
        return Effect(unknown="no inferences were counted under one of the limits",
                      basis="measured"), []
    better, worse = (t.low, t.high) if change <= 0 else (t.high, t.low)
    delta_j = (better.energy_per_inference_j - worse.energy_per_inference_j)
    kwh = delta_j * m.month_inferences / 3.6e6
    share = kwh / m.kwh if m.kwh else 0.0
    busy = better.util_pct is not None and better.util_pct >= NEAR_FULL_UTIL_PCT
    usd = None if busy else (m.electricity_usd * share)
    levers = [f"keep the power limit at {better.limit_w:.0f} W rather than {worse.limit_w:.0f} W "
              f"(nvidia-smi -pl {better.limit_w:.0f})"]
    effect = Effect(
        kwh_per_month=kwh, co2e_kg_per_month=m.co2e_kg * share, usd_per_month=usd,
        j_per_inference_saved=-delta_j, basis="measured",
        usd_per_1k_saved=None if usd is None else -usd / m.month_inferences * 1000,
        unknown="" if usd is not None else (
            f"cost unknown: the GPUs were {better.util_pct:.0f} % busy at {better.limit_w:.0f}"
            " W, so a slower cap may need more GPU-hours"),
        method=(f"measured ({t.source}): {better.energy_per_inference_j:.3g} J per inference "
                f"at {better.limit_w:.0f} W against {worse.energy_per_inference_j:.3g} J at "
                f"{worse.limit_w:.0f} W, times the month's {m.month_inferences:,.0f} "
                "inferences; CO2e at the same intensity; cost: hourly-billed GPUs cost the "
                "same per hour at any cap, on-premises electricity falls with the energy"))
    return effect, levers


def _published_cap_effect(p: Profile, m: Monthly, limit: float | None) -> tuple[Effect, str]:
    target = f"{limit * PUBLISHED_CAP_SHARE:.0f} W" if limit else \
        f"{PUBLISHED_CAP_SHARE * 100:.0f} % of the board power"
    busy = p.util_pct is not None and p.util_pct >= NEAR_FULL_UTIL_PCT
    usd = None if busy else m.electricity_usd * PUBLISHED_CAP_ENERGY_CHANGE
    effect = scaled_effect(
        m, PUBLISHED_CAP_ENERGY_CHANGE, usd, basis="published",
        unknown="" if usd is not None else (
            "cost unknown: the GPUs are near full and the source gives no time figure for "
            "this workload"),
        method=(f"published-curve estimate, not measured here: a cap at "
                f"{PUBLISHED_CAP_SHARE * 100:.0f} % of the default power limit cut training "
                f"energy by {-PUBLISHED_CAP_ENERGY_CHANGE * 100:.0f} % at a marginal time cost "
                f"({PUBLISHED_CAP_SOURCE}), applied to the measured month. Cost: "
                "hourly-billed GPUs cost the same per hour at any cap; on-premises "
                "electricity falls with the energy. Measure it: run a period at the cap "
                "and mark the two periods as variants (a measured trade-off needs at least "
                f"{MIN_CAP_HOURS} hours that counted inferences under each of two limits)."))
    return effect, target


def throttled(p: Profile, m: Monthly, spec: gpu_table.GpuSpec | None,
               t: Tradeoff | None, conf: tuple[str, str]) -> list[Diagnosis]:
    out = []
    limit = f" (enforced limit {p.power_limit_w:.0f} W)" if p.power_limit_w else ""
    clock = [] if p.sm_clock_share is None else [
        f"SM clock {p.sm_clock_mhz:.0f} MHz on average, {p.sm_clock_share * 100:.0f} % of its "
        f"{p.max_sm_clock_mhz:.0f} MHz maximum"]
    capped = p.power_capped_share is not None and p.power_capped_share >= POWER_CAPPED_SHARE
    if capped and t is None:
        effect, target = _published_cap_effect(p, m, own_limit(p, spec))
        out.append(Diagnosis(
            "power_capped", "Power-capped", [
                f"clocks held back by the power cap in {p.power_capped_share * 100:.0f} % of "
                f"samples{limit}", *clock],
            [f"try a lower cap (about {target}): on a GPU that already meets its cap, the "
             "last watts buy the least speed", "a higher cap buys speed with energy"],
            effect, *estimate_confidence(conf, "a published curve from other GPUs and "
                                                "workloads")))
    if t is not None:
        effect, levers = _tradeoff_effect(t, m)
        evidence = [
            f"{t.low.hours} h at {t.low.limit_w:.0f} W: {_fmt(t.low.energy_per_inference_j)} J "
            f"per inference, {_fmt(t.low.throughput_per_s)} inferences/s, utilisation "
            f"{_fmt(t.low.util_pct)} %",
            f"{t.high.hours} h at {t.high.limit_w:.0f} W: "
            f"{_fmt(t.high.energy_per_inference_j)} J per inference, "
            f"{_fmt(t.high.throughput_per_s)} inferences/s, utilisation "
            f"{_fmt(t.high.util_pct)} %",
            f"energy per inference {_pct(t.energy_change)} and throughput "
            f"{_pct(t.throughput_change)} at the lower limit; {t.verdict}"]
        if capped:
            evidence.insert(0, f"clocks held back by the power cap in "
                               f"{p.power_capped_share * 100:.0f} % of samples{limit}")
        level = conf if t.p_value is not None and t.p_value < 0.05 else (
            "low", f"{conf[1]}; the difference is not beyond noise")
        out.append(Diagnosis(
            "power_cap_tradeoff", "Power cap: measured trade-off", evidence, levers, effect,
            *level))
    if p.thermal_share is not None and p.thermal_share >= THERMAL_SHARE:
        out.append(Diagnosis(
            "thermal", "Thermally throttled", [
                f"thermal slowdown in {p.thermal_share * 100:.0f} % of samples", *clock],
            ["check cooling and airflow; hot GPUs run slower for the same energy"],
            Effect(unknown="the speed lost to heat is not measured separately: NVML reports "
                           "that the clocks were slowed, not by how much"), *conf))
    return out


def _fmt(x: float | None) -> str:
    return "unknown" if x is None else f"{x:.3g}"


def _pct(x: float | None) -> str:
    return "unknown" if x is None else f"{x * 100:+.1f} %"
