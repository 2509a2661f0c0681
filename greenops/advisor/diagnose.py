"""The efficiency advisor: a workload's measured bottleneck and what pulling a lever would save.

Plain functions over the GPU rollups (telemetry.GpuHour/GpuMinute). Energy, carbon and cost are
never recomputed here: they come from the one owner of each (greenops.energy.it_energy,
carbon.accounting.carbon_of, costs.accounting.cost_of), and a saving is a stated share of those
measured monthly figures. Rules, in order of trust:

* nothing is diagnosed from less than MIN_MEASURED_MINUTES of measured GPU minutes;
* a rule that needs a metric runs only when that metric was reported for at least
  MIN_METRIC_SHARE of the samples (a GPU that does not support it gives no diagnosis, not a
  wrong one); the page lists the rules that were skipped and why;
* an effect that cannot be computed from measurements is unknown with its reason, never 0.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

from django.db.models import Count, Min, Q, Sum

from greenops import windows
from greenops.carbon.accounting import carbon_of
from greenops.costs.accounting import cost_of
from greenops.energy import it_energy
from greenops.kpis import queries
from greenops.kpis.models import Period
from greenops.telemetry.models import GpuHour, GpuMinute
from greenops.workloads.models import Workload

MIN_MEASURED_MINUTES = 60  # one GPU-hour of minutes: below that a mean says little
MIN_METRIC_SHARE = 0.9  # a metric reported by fewer samples is treated as unsupported
MONTH_S = 30 * 86400  # "per month" = 30 days, the convention of the cost pages

# Thresholds. Under-utilised: below UNDER_UTIL_PCT mean GPU utilisation; consolidation plans
# for TARGET_UTIL_PCT on the remaining GPUs (headroom for bursts). Memory-bound: the memory
# controller busy at least MEMORY_BOUND_PCT of the time. Throttled: the power cap (or power
# brake) active in POWER_CAPPED_SHARE of samples; thermal slowdown in THERMAL_SHARE of them.
UNDER_UTIL_PCT = 40.0
TARGET_UTIL_PCT = 70.0
MEMORY_BOUND_PCT = 60.0
POWER_CAPPED_SHARE = 0.2
THERMAL_SHARE = 0.05

# The same range choices as every team page; windows end on whole hours so hour rollups add
# up exactly ("hour" is the current clock hour, as on the KPI pages).
RANGES = windows.ranges("hour", "day", "week", "month", "quarter")  # the home's choices


@dataclass(frozen=True)
class Profile:
    """What the workload's GPUs measured over the window (means over reported samples)."""

    window: windows.Window
    gpus: int
    samples: int
    measured_minutes: int  # GPU-minutes with at least one sample
    simulated_samples: int
    util_pct: float | None
    power_w: float | None
    mem_util_pct: float | None
    mem_util_share: float  # share of samples that reported memory utilisation
    pcie_tx_kib_s: float | None
    pcie_rx_kib_s: float | None
    pcie_share: float
    power_capped_share: float | None
    thermal_share: float | None
    throttle_share: float
    power_limit_w: float | None

    @property
    def measured_s(self) -> float:
        """Wall-clock seconds measured: GPU-minutes spread over the workload's GPUs."""
        return self.measured_minutes * 60.0 / self.gpus if self.gpus else 0.0

    @property
    def enough(self) -> bool:
        return self.measured_minutes >= MIN_MEASURED_MINUTES


def _mean(total: float | None, n: int | None) -> float | None:
    return total / n if n else None


def _share(part: int | None, whole: int) -> float:
    return (part or 0) / whole if whole else 0.0


def profile(workload: Workload, window: windows.Window) -> Profile:
    gpu_ids = list(workload.gpu_queryset().values_list("id", flat=True))
    rows = GpuHour.objects.filter(gpu_id__in=gpu_ids, bucket__gte=window.start,
                                  bucket__lt=window.end)
    a = rows.aggregate(
        samples=Sum("samples"), sim=Sum("simulated_samples"), util_sum=Sum("util_sum"),
        util_n=Sum("util_n"), power_sum=Sum("power_sum_w"), power_n=Sum("power_n"),
        mem_sum=Sum("mem_util_sum"), mem_n=Sum("mem_util_n"), tx=Sum("pcie_tx_sum_kib_s"),
        rx=Sum("pcie_rx_sum_kib_s"), pcie_n=Sum("pcie_n"), thr_n=Sum("throttle_n"),
        capped=Sum("power_capped_samples"), thermal=Sum("thermal_samples"),
        limit=Min("power_limit_min_w"))
    minutes = GpuMinute.objects.filter(gpu_id__in=gpu_ids, bucket__gte=window.start,
                                       bucket__lt=window.end).aggregate(
        n=Count("bucket", filter=Q(samples__gt=0)))["n"]
    samples = a["samples"] or 0
    thr_n = a["thr_n"] or 0
    return Profile(
        window=window, gpus=len(gpu_ids), samples=samples, measured_minutes=minutes or 0,
        simulated_samples=a["sim"] or 0,
        util_pct=_mean(a["util_sum"], a["util_n"]), power_w=_mean(a["power_sum"], a["power_n"]),
        mem_util_pct=_mean(a["mem_sum"], a["mem_n"]), mem_util_share=_share(a["mem_n"], samples),
        pcie_tx_kib_s=_mean(a["tx"], a["pcie_n"]), pcie_rx_kib_s=_mean(a["rx"], a["pcie_n"]),
        pcie_share=_share(a["pcie_n"], samples),
        power_capped_share=_mean(a["capped"], thr_n), thermal_share=_mean(a["thermal"], thr_n),
        throttle_share=_share(thr_n, samples), power_limit_w=a["limit"])


@dataclass(frozen=True)
class Monthly:
    """The workload's measured energy, carbon and cost, scaled to 30 days."""

    kwh: float
    co2e_kg: float
    usd: float | None  # None: a host has no price
    usd_problem: str
    scale: float  # month seconds / measured seconds
    inferences: int = 0  # counted in the window (KPI hour rollups), 0 when none were sent


def monthly(workload: Workload, p: Profile) -> Monthly:
    """Measured over the window by the owners, then scaled to 30 days. Energy and CO2e scale by
    30 days / measured seconds (a workload measured 12 h of a day is scaled from those 12 h,
    not diluted by the gap). Cost is billed by the host-hour, so each host's hardware cost
    scales by 720 h / its billed hours (a 30-minute sample billed as a whole hour would
    otherwise be counted twice over); on-premises electricity scales like energy."""
    energy = it_energy(list(workload.gpu_queryset()), p.window.start, p.window.end)
    carbon = carbon_of(energy)
    cost = cost_of(energy)
    scale = MONTH_S / p.measured_s if p.measured_s else 0.0
    usd = None
    if cost.cost_usd is not None:
        month_h = MONTH_S / 3600
        usd = sum((line.hardware_usd * month_h / line.billed_hours if line.billed_hours
                   else 0.0) + line.electricity_usd * scale for line in cost.hosts.values())
    requests = queries.kpis(workload.team, workload, p.window.start, p.window.end,
                            Period.HOUR).get("requests") or 0
    return Monthly(kwh=energy.it_energy_kwh * scale, co2e_kg=carbon.co2e_kg * scale, usd=usd,
                   usd_problem="; ".join(cost.problems) or "no price for a host", scale=scale,
                   inferences=int(requests))


@dataclass(frozen=True)
class Effect:
    """Expected change per month; all None with `unknown` saying why when it cannot be known."""

    kwh_per_month: float | None = None
    co2e_kg_per_month: float | None = None
    usd_per_month: float | None = None
    method: str = ""
    unknown: str = ""
    # At the measured load: the saving divided by the inferences of the same month.
    j_per_inference_saved: float | None = None
    usd_per_1k_saved: float | None = None

    # What a page says: "saves 299 kWh" reads better than "-299 kWh".
    @property
    def kwh_saved(self) -> float | None:
        return None if self.kwh_per_month is None else -self.kwh_per_month

    @property
    def co2e_kg_saved(self) -> float | None:
        return None if self.co2e_kg_per_month is None else -self.co2e_kg_per_month

    @property
    def usd_saved(self) -> float | None:
        return None if self.usd_per_month is None else -self.usd_per_month


@dataclass(frozen=True)
class Diagnosis:
    key: str
    title: str
    evidence: list[str]
    levers: list[str]
    effect: Effect
    confidence: str  # "high", "medium", "low"
    confidence_why: str


@dataclass
class Advice:
    profile: Profile
    monthly: Monthly | None
    diagnoses: list[Diagnosis] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # rules not run, and why
    not_enough: str = ""  # set when nothing may be diagnosed

    @property
    def simulated(self) -> bool:
        return self.profile.simulated_samples > 0


def _confidence(p: Profile) -> tuple[str, str]:
    """How much of the window was measured decides how far a mean can be trusted."""
    share = p.measured_s / p.window.span_s if p.window.span_s else 0.0
    text = f"measured {share * 100:.0f} % of the {p.window.label.lower()}"
    if share >= 0.8 and p.measured_s >= 86400:
        return "high", text
    if share >= 0.5:
        return "medium", text
    return "low", text


def _under_utilised(p: Profile, m: Monthly, conf: tuple[str, str]) -> Diagnosis | None:
    if p.util_pct is None or p.util_pct >= UNDER_UTIL_PCT:
        return None
    needed = max(1, math.ceil(p.gpus * p.util_pct / TARGET_UTIL_PCT))
    evidence = [f"mean GPU utilisation {p.util_pct:.1f} % over {p.gpus} GPU(s) "
                f"(below {UNDER_UTIL_PCT:.0f} %)"]
    if p.power_w is not None:
        evidence.append(f"mean power {p.power_w:.0f} W per GPU")
    levers = ["batch requests (dynamic batching) so each GPU does more per wake-up",
              "autoscale replicas to the load"]
    if needed < p.gpus:
        share = (p.gpus - needed) / p.gpus
        levers.insert(0, f"serve the measured load on {needed} of {p.gpus} GPUs")
        month_inferences = m.inferences * m.scale
        per_inference = {}
        if month_inferences:
            per_inference = {
                "j_per_inference_saved": m.kwh * share * 3.6e6 / month_inferences,
                "usd_per_1k_saved": None if m.usd is None
                else m.usd * share / month_inferences * 1000}
        effect = Effect(
            **per_inference,
            kwh_per_month=-m.kwh * share, co2e_kg_per_month=-m.co2e_kg * share,
            usd_per_month=None if m.usd is None else -m.usd * share,
            unknown="" if m.usd is not None else f"cost unknown: {m.usd_problem}",
            method=(f"{p.gpus} GPUs × {p.util_pct:.1f} % ÷ {TARGET_UTIL_PCT:.0f} % target = "
                    f"{needed} GPU(s); the {p.gpus - needed} freed GPUs' share "
                    f"({share * 100:.0f} %) of the measured monthly energy, CO2e and cost. "
                    "An upper bound: the remaining GPUs draw more when busier."))
    else:
        levers.insert(0, "a smaller GPU, or sharing this GPU with another workload")
        effect = Effect(unknown="one GPU cannot be consolidated further; what batching saves "
                                "depends on the model: measure it as a variant")
    return Diagnosis("under_utilised", "Under-utilised GPUs", evidence, levers, effect, *conf)


def _memory_bound(p: Profile, conf: tuple[str, str]) -> Diagnosis | None:
    if p.mem_util_pct is None or p.mem_util_pct < MEMORY_BOUND_PCT:
        return None
    evidence = [f"memory controller busy {p.mem_util_pct:.1f} % of the time "
                f"(at least {MEMORY_BOUND_PCT:.0f} %)"]
    if p.util_pct is not None:
        evidence.append(f"GPU utilisation {p.util_pct:.1f} %")
    return Diagnosis(
        "memory_bound", "Memory-bandwidth-bound", evidence,
        ["quantize weights (int8/fp8) to move fewer bytes per token",
         "mixed precision (bf16/fp16) where fp32 is still used"],
        Effect(unknown="the speed-up of quantization depends on the model and kernels: run "
                       "the quantized model as a variant and compare"), *conf)


def _throttled(p: Profile, conf: tuple[str, str]) -> list[Diagnosis]:
    out = []
    limit = f" (enforced limit {p.power_limit_w:.0f} W)" if p.power_limit_w else ""
    if p.power_capped_share is not None and p.power_capped_share >= POWER_CAPPED_SHARE:
        out.append(Diagnosis(
            "power_capped", "Power-capped", [
                f"clocks held back by the power cap in {p.power_capped_share * 100:.0f} % of "
                f"samples{limit}"],
            ["the cap binds: a lower cap often costs little speed per watt saved; a higher "
             "one buys speed with energy"],
            Effect(unknown="the energy/throughput trade-off of another cap is not measured: "
                           "run a period at the new cap and compare the two periods"), *conf))
    if p.thermal_share is not None and p.thermal_share >= THERMAL_SHARE:
        out.append(Diagnosis(
            "thermal", "Thermally throttled", [
                f"thermal slowdown in {p.thermal_share * 100:.0f} % of samples"],
            ["check cooling and airflow; hot GPUs run slower for the same energy"],
            Effect(unknown="the speed lost to heat is not measured separately"), *conf))
    return out


def advise(workload: Workload, window: windows.Window) -> Advice:
    p = profile(workload, window)
    if not p.enough:
        return Advice(p, None, not_enough=(
            f"{p.measured_minutes} GPU-minutes measured in this range; the advisor needs at "
            f"least {MIN_MEASURED_MINUTES}"))
    m = monthly(workload, p)
    advice = Advice(p, m)
    conf = _confidence(p)
    found = _under_utilised(p, m, conf)
    if found:
        advice.diagnoses.append(found)
    if p.mem_util_share >= MIN_METRIC_SHARE:
        found = _memory_bound(p, conf)
        if found:
            advice.diagnoses.append(found)
    else:
        advice.skipped.append(f"memory-bandwidth: memory utilisation reported by "
                              f"{p.mem_util_share * 100:.0f} % of samples")
    if p.throttle_share >= MIN_METRIC_SHARE:
        advice.diagnoses.extend(_throttled(p, conf))
    else:
        advice.skipped.append(f"power/thermal throttling: throttle reasons reported by "
                              f"{p.throttle_share * 100:.0f} % of samples")
    return advice


def window(range_key: str, now: dt.datetime | None = None) -> windows.Window:
    """The named range ending at the end of the current hour (whole hour rollups)."""
    return windows.named(range_key, now, windows.HOUR)
