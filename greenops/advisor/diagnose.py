"""The efficiency advisor: a workload's measured bottleneck and what pulling a lever would save.

Plain functions over the GPU rollups (telemetry.GpuHour/GpuMinute). Energy, carbon and cost are
never recomputed here: they come from the one owner of each (greenops.energy.it_energy,
carbon.accounting.carbon_of, costs.accounting.cost_of), and a saving is a stated share of those
measured monthly figures. Rules, in order of trust:

* nothing is diagnosed from less than MIN_MEASURED_MINUTES of measured GPU minutes;
* a rule that needs a metric runs only when that metric was reported for at least
  MIN_METRIC_SHARE of the samples (a GPU that does not support it gives no diagnosis, not a
  wrong one); the page lists the rules that were skipped and why;
* an effect that cannot be computed from measurements is unknown with its reason, never 0;
* an effect computed from published figures (GPU datasheets in data/gpus.csv, a paper's
  power-cap curve) is labelled an estimate with its method and source.

Power at another utilisation (used by the alternative-GPU and memory-bound estimates): the
straight line through the measured point (mean utilisation, mean power) and (100 %, the power
limit), clamped to [0, limit] -- one measured point and the published ceiling, nothing else;
where that line would reach 0 W above 0 % busy, the line through 0 W at 0 % and the measured
point.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

from django.db.models import Count, Max, Min, Q, Sum
from django.db.models.functions import TruncHour

from collectors.bench_gate import mann_whitney_u, smallest_p
from greenops import windows
from greenops.advisor import gpus as gpu_table
from greenops.carbon.accounting import carbon_of
from greenops.costs.accounting import cost_of
from greenops.costs.recommend import MEMORY_HEADROOM
from greenops.energy import it_energy
from greenops.kpis import metrics, queries
from greenops.kpis.models import Period
from greenops.telemetry.models import Gpu, GpuHour, GpuMinute
from greenops.workloads.models import Workload

MIN_MEASURED_MINUTES = 60  # one GPU-hour of minutes: below that a mean says little
MIN_METRIC_SHARE = 0.9  # a metric reported by fewer samples is treated as unsupported
MONTH_S = 30 * 86400  # "per month" = 30 days, the convention of the cost pages
MONTH_H = MONTH_S / 3600

# Thresholds. Under-utilised: below UNDER_UTIL_PCT mean GPU utilisation; consolidation plans
# for TARGET_UTIL_PCT on the remaining GPUs (headroom for bursts). Memory-bound: the memory
# interface busy at least MEMORY_BOUND_PCT of the time (DCGM DRAM activity, or NVML's memory
# utilisation where DCGM is absent) while the tensor pipes stay below TENSOR_IDLE_PCT (DCGM
# only). Throttled: the power cap (or power brake) active in POWER_CAPPED_SHARE of samples;
# thermal slowdown in THERMAL_SHARE of them. Input-bound: PCIe moving at least LINK_BOUND_SHARE
# of the link's published rate in one direction while the GPU is busy below SM_WAIT_UTIL_PCT.
UNDER_UTIL_PCT = 40.0
TARGET_UTIL_PCT = 70.0
MEMORY_BOUND_PCT = 60.0
TENSOR_IDLE_PCT = 20.0
POWER_CAPPED_SHARE = 0.2
THERMAL_SHARE = 0.05
LINK_BOUND_SHARE = 0.5
SM_WAIT_UTIL_PCT = 80.0
NEAR_FULL_UTIL_PCT = 90.0  # past this a slower setting needs more GPU-hours
MIN_CAP_HOURS = 3  # hours at each power limit before their trade-off is measured

# The published power-cap curve used when no two caps were measured: McDonald et al.,
# "Great Power, Great Responsibility: Recommendations for Reducing Energy for Training
# Language Models", Findings of NAACL 2022 (arXiv 2205.09646): capping V100 GPUs at 150 W of
# their 250 W default cut the energy of training a transformer language model by about 15 %
# "with marginal increase in overall computation time" (no figure for other workloads).
PUBLISHED_CAP_SHARE = 150 / 250
PUBLISHED_CAP_ENERGY_CHANGE = -0.15
PUBLISHED_CAP_SOURCE = ("McDonald et al., Findings of NAACL 2022, arXiv 2205.09646 "
                        "(https://arxiv.org/abs/2205.09646), read 2026-11-30")

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
    mem_used_max_mib: float | None = None  # highest memory used by one GPU
    gpu_name: str = ""  # what NVML calls the workload's GPUs (the most common name)
    # DCGM profiling (None / share 0 where the host runs no dcgm-exporter).
    dram_active_pct: float | None = None
    dram_share: float = 0.0
    tensor_active_pct: float | None = None
    tensor_share: float = 0.0
    sm_active_pct: float | None = None
    sm_active_share: float = 0.0
    nvlink_tx_kib_s: float | None = None
    nvlink_rx_kib_s: float | None = None
    nvlink_share: float = 0.0
    sm_clock_mhz: float | None = None  # mean over samples that reported it
    max_sm_clock_mhz: float | None = None  # NVML's maximum, lowest over the GPUs

    @property
    def sm_clock_share(self) -> float | None:
        if self.sm_clock_mhz is None or not self.max_sm_clock_mhz:
            return None
        return self.sm_clock_mhz / self.max_sm_clock_mhz

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
    sums = dict(
        samples=Sum("samples"), sim=Sum("simulated_samples"), util_sum=Sum("util_sum"),
        util_n=Sum("util_n"), power_sum=Sum("power_sum_w"), power_n=Sum("power_n"),
        mem_sum=Sum("mem_util_sum"), mem_n=Sum("mem_util_n"), tx=Sum("pcie_tx_sum_kib_s"),
        rx=Sum("pcie_rx_sum_kib_s"), pcie_n=Sum("pcie_n"), thr_n=Sum("throttle_n"),
        capped=Sum("power_capped_samples"), thermal=Sum("thermal_samples"),
        limit=Min("power_limit_min_w"), mem_used=Max("mem_used_max_mib"),
        # DCGM profiling (dcgm-exporter); n = 0 where the host runs none.
        dram_sum=Sum("dram_active_sum"), dram_n=Sum("dram_active_n"),
        tensor_sum=Sum("tensor_active_sum"), tensor_n=Sum("tensor_active_n"),
        sm_sum=Sum("sm_active_sum"), sm_n=Sum("sm_active_n"),
        nvl_tx=Sum("nvlink_tx_sum_kib_s"), nvl_rx=Sum("nvlink_rx_sum_kib_s"),
        nvl_n=Sum("nvlink_n"), clock_sum=Sum("sm_clock_sum_mhz"), clock_n=Sum("sm_clock_n"))
    a = rows.aggregate(**sums)
    minutes = GpuMinute.objects.filter(gpu_id__in=gpu_ids, bucket__gte=window.start,
                                       bucket__lt=window.end).aggregate(
        n=Count("bucket", filter=Q(samples__gt=0)))["n"]
    gpu_rows = list(Gpu.objects.filter(id__in=gpu_ids).values_list("name", "max_sm_clock_mhz"))
    names = [n for n, _ in gpu_rows if n]
    max_clocks = [c for _, c in gpu_rows if c]
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
        throttle_share=_share(thr_n, samples), power_limit_w=a["limit"],
        mem_used_max_mib=a["mem_used"],
        gpu_name=max(set(names), key=lambda n: (names.count(n), n)) if names else "",
        dram_active_pct=_mean(a["dram_sum"], a["dram_n"]),
        dram_share=_share(a["dram_n"], samples),
        tensor_active_pct=_mean(a["tensor_sum"], a["tensor_n"]),
        tensor_share=_share(a["tensor_n"], samples),
        sm_active_pct=_mean(a["sm_sum"], a["sm_n"]),
        sm_active_share=_share(a["sm_n"], samples),
        nvlink_tx_kib_s=_mean(a["nvl_tx"], a["nvl_n"]),
        nvlink_rx_kib_s=_mean(a["nvl_rx"], a["nvl_n"]),
        nvlink_share=_share(a["nvl_n"], samples),
        sm_clock_mhz=_mean(a["clock_sum"], a["clock_n"]),
        max_sm_clock_mhz=min(max_clocks) if max_clocks else None)


@dataclass(frozen=True)
class Monthly:
    """The workload's measured energy, carbon and cost, scaled to 30 days."""

    kwh: float
    co2e_kg: float
    usd: float | None  # None: a host has no price
    usd_problem: str
    scale: float  # month seconds / measured seconds
    inferences: int = 0  # counted in the window (KPI hour rollups), 0 when none were sent
    electricity_usd: float = 0.0  # the part of usd paid per kWh (on premises), scaled likewise

    @property
    def month_inferences(self) -> float:
        return self.inferences * self.scale

    @property
    def j_per_inference(self) -> float | None:
        return self.kwh * 3.6e6 / self.month_inferences if self.month_inferences else None

    @property
    def usd_per_1k(self) -> float | None:
        if self.usd is None or not self.month_inferences:
            return None
        return self.usd / self.month_inferences * 1000


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
    electricity = sum(line.electricity_usd for line in cost.hosts.values()) * scale
    if cost.cost_usd is not None:
        usd = sum((line.hardware_usd * MONTH_H / line.billed_hours if line.billed_hours
                   else 0.0) + line.electricity_usd * scale for line in cost.hosts.values())
    requests = queries.kpis(workload.team, workload, p.window.start, p.window.end,
                            Period.HOUR).get("requests") or 0
    return Monthly(kwh=energy.it_energy_kwh * scale, co2e_kg=carbon.co2e_kg * scale, usd=usd,
                   usd_problem="; ".join(cost.problems) or "no price for a host", scale=scale,
                   inferences=int(requests), electricity_usd=electricity)


@dataclass(frozen=True)
class Effect:
    """Expected change per month; all None with `unknown` saying why when it cannot be known.
    `basis` says where the figures come from: "measured" (this workload's own measurements),
    "estimate" (measurements scaled by a stated model) or "published" (a cited source's
    figure applied to the measured month)."""

    kwh_per_month: float | None = None
    co2e_kg_per_month: float | None = None
    usd_per_month: float | None = None
    method: str = ""
    unknown: str = ""
    # At the measured load: the saving divided by the inferences of the same month.
    j_per_inference_saved: float | None = None
    usd_per_1k_saved: float | None = None
    basis: str = "estimate"

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


def _scaled_effect(m: Monthly, energy_change: float, usd_change: float | None, method: str,
                   unknown: str = "", basis: str = "estimate") -> Effect:
    """An effect that changes the month's energy (and so CO2e, at the same grid intensity and
    PUE) by the share `energy_change` and its cost by `usd_change` dollars (None: unknown)."""
    kwh = m.kwh * energy_change
    per_inference = {}
    if m.month_inferences:
        per_inference["j_per_inference_saved"] = -kwh * 3.6e6 / m.month_inferences
        if usd_change is not None:
            per_inference["usd_per_1k_saved"] = -usd_change / m.month_inferences * 1000
    return Effect(kwh_per_month=kwh, co2e_kg_per_month=m.co2e_kg * energy_change,
                  usd_per_month=usd_change, method=method, unknown=unknown, basis=basis,
                  **per_inference)


@dataclass(frozen=True)
class Diagnosis:
    key: str
    title: str
    evidence: list[str]
    levers: list[str]
    effect: Effect
    confidence: str  # "high", "medium", "low"
    confidence_why: str
    # Extra rows for the page (the alternative GPUs considered, a measured trade-off).
    table: list[dict] = field(default_factory=list)


@dataclass
class Advice:
    profile: Profile
    monthly: Monthly | None
    diagnoses: list[Diagnosis] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # rules not run, and why
    not_enough: str = ""  # set when nothing may be diagnosed
    spec: gpu_table.GpuSpec | None = None  # the workload's GPU in the published table

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


def _estimate_confidence(conf: tuple[str, str], why: str) -> tuple[str, str]:
    """Published figures and a one-point power line are rough: never above medium."""
    level = "medium" if conf[0] == "high" else "low"
    return level, f"{conf[1]}; {why}"


def power_at(p: Profile, limit_w: float, util_pct: float, own_limit_w: float) -> float | None:
    """Watts a GPU with power limit `limit_w` draws at `util_pct`, from the measured line (see
    the module docstring): the measured share of the own limit at the measured utilisation,
    rising linearly to the whole limit at 100 %."""
    if p.util_pct is None or p.power_w is None or not own_limit_w:
        return None
    u0, share0 = p.util_pct / 100, min(1.0, p.power_w / own_limit_w)
    u = util_pct / 100
    if u0 >= 0.999:
        share = share0
    elif share0 - (1 - share0) * u0 / (1 - u0) < 0 and u0 > 0:
        # That line would reach 0 W above 0 % busy (a GPU drawing less than its share of the
        # limit): the line through 0 W at 0 % and the measured point instead.
        share = share0 * u / u0
    else:
        share = share0 + (1 - share0) * (u - u0) / (1 - u0)
    return limit_w * min(1.0, max(0.0, share))


def own_limit(p: Profile, spec: gpu_table.GpuSpec | None) -> float | None:
    """The ceiling of the measured power line: the enforced limit NVML reported, else the
    published board power."""
    return p.power_limit_w or (spec.board_power_w if spec else None)


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
        effect = _scaled_effect(
            m, -share, None if m.usd is None else -m.usd * share,
            unknown="" if m.usd is not None else f"cost unknown: {m.usd_problem}",
            method=(f"{p.gpus} GPUs × {p.util_pct:.1f} % ÷ {TARGET_UTIL_PCT:.0f} % target = "
                    f"{needed} GPU(s); the {p.gpus - needed} freed GPUs' share "
                    f"({share * 100:.0f} %) of the measured monthly energy, CO2e and cost. "
                    "An upper bound: the remaining GPUs draw more when busier."))
    else:
        levers.insert(0, "a smaller GPU, or sharing this GPU with another workload")
        effect = Effect(unknown="one GPU cannot be consolidated further; what batching saves "
                                "depends on the model: measure it as a variant (see the "
                                "smaller-GPU estimate where one fits)")
    return Diagnosis("under_utilised", "Under-utilised GPUs", evidence, levers, effect, *conf)


def _memory_signal(p: Profile) -> tuple[str, float, str] | None:
    """(source, percent, label) of the memory-interface activity to judge by: DCGM's DRAM
    activity when reported, else NVML's memory utilisation (labelled: it counts the time any
    memory read or write was in flight, a coarser measure). None: neither was reported."""
    if p.dram_share >= MIN_METRIC_SHARE and p.dram_active_pct is not None:
        return "dcgm", p.dram_active_pct, "DRAM interface active (DCGM DRAM_ACTIVE)"
    if p.mem_util_share >= MIN_METRIC_SHARE and p.mem_util_pct is not None:
        return "nvml", p.mem_util_pct, ("memory controller busy (NVML memory utilisation, "
                                        "a coarser measure than DCGM's DRAM activity)")
    return None


def _memory_bound(p: Profile, m: Monthly, spec: gpu_table.GpuSpec | None,
                  conf: tuple[str, str]) -> Diagnosis | None:
    signal = _memory_signal(p)
    if signal is None or signal[1] < MEMORY_BOUND_PCT:
        return None
    source, pct, label = signal
    evidence = [f"{label} {pct:.1f} % of the time (at least {MEMORY_BOUND_PCT:.0f} %)"]
    if source == "dcgm":
        if p.tensor_share < MIN_METRIC_SHARE or p.tensor_active_pct is None:
            return None  # DRAM busy alone is not the signature: the tensor pipes must idle
        if p.tensor_active_pct >= TENSOR_IDLE_PCT:
            return None
        evidence.append(f"tensor pipes active {p.tensor_active_pct:.1f} % "
                        f"(below {TENSOR_IDLE_PCT:.0f} %)")
    if p.util_pct is not None:
        evidence.append(f"GPU utilisation {p.util_pct:.1f} %")
    limit = own_limit(p, spec)
    now_w = p.power_w
    half_w = None if p.util_pct is None or limit is None else power_at(
        p, limit, p.util_pct / 2, limit)
    levers = ["quantize weights (int8/fp8) to move fewer bytes per token",
              "mixed precision (bf16/fp16) where fp32 is still used"]
    conf2 = _estimate_confidence(conf, "an upper bound from halved bytes, not a measurement")
    if half_w is None or not now_w:
        effect = Effect(unknown="the power line needs the measured utilisation, power and "
                                "power limit (or the GPU's published board power)")
    else:
        change = half_w / now_w - 1
        effect = _scaled_effect(
            m, change, 0.0 if m.electricity_usd == 0 else m.electricity_usd * change,
            method=(f"upper bound: int8 weights move half the bytes of fp16, so a "
                    f"bandwidth-bound step takes at most half the time; the same load then "
                    f"keeps the GPUs busy {p.util_pct / 2:.1f} % instead of {p.util_pct:.1f} "
                    f"%, drawing {half_w:.0f} W instead of the measured {now_w:.0f} W on the "
                    f"power line through the measurement and {limit:.0f} W at 100 %. Cost: "
                    "unchanged for hourly-billed GPUs (fewer GPUs would save more: see "
                    "under-utilised), the electricity share on premises. Run the quantized "
                    "model as a variant to measure it."))
    return Diagnosis("memory_bound", "Memory-bandwidth-bound", evidence, levers, effect, *conf2)


# ---- Power cap: measured trade-off, or the published curve -------------------------------

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
    from greenops.advisor.variants import ALPHA

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
    from greenops.advisor import variants
    from greenops.advisor.models import VariantPair

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
    effect = _scaled_effect(
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
                "and mark the two periods as variants."))
    return effect, target


def _throttled(p: Profile, m: Monthly, spec: gpu_table.GpuSpec | None,
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
            effect, *_estimate_confidence(conf, "a published curve from other GPUs and "
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


# ---- Input- or communication-bound --------------------------------------------------------

LINKS = {
    "pcie": ("PCIe", "Input-bound (PCIe)", "host → GPU (RX)", "GPU → host (TX)",
             ["feed from pinned memory with more data-loader workers and prefetch",
              "keep tensors on the GPU between steps; move pre-processing onto the GPU",
              "place the job where its GPUs share a faster link (NVLink, PCIe Gen5)"]),
    "nvlink": ("NVLink", "Communication-bound (NVLink)", "received (RX)", "sent (TX)",
               ["overlap collectives with compute (bucketed all-reduce, async tensor parallel)",
                "fewer, larger exchanges: a bigger per-GPU batch or gradient accumulation",
                "keep tensor-parallel groups inside one NVLink domain; shard less"]),
}


def _link_traffic(p: Profile, link: str) -> tuple[float | None, float | None, float]:
    if link == "pcie":
        return p.pcie_tx_kib_s, p.pcie_rx_kib_s, p.pcie_share
    return p.nvlink_tx_kib_s, p.nvlink_rx_kib_s, p.nvlink_share


def _busy(p: Profile) -> tuple[float | None, str]:
    """How busy the SMs were: DCGM's SM activity where reported (the share of cycles an SM had
    work), else NVML's utilisation (the share of time any kernel ran: coarser, labelled)."""
    if p.sm_active_share >= MIN_METRIC_SHARE and p.sm_active_pct is not None:
        return p.sm_active_pct, "SM active (DCGM)"
    return p.util_pct, "GPU utilisation (NVML)"


def _link_bound(p: Profile, m: Monthly, spec: gpu_table.GpuSpec | None, link: str,
                conf: tuple[str, str]) -> Diagnosis | None:
    """The link moving at least LINK_BOUND_SHARE of its published per-direction rate on
    average while the SMs stay below SM_WAIT_UTIL_PCT busy: the SMs wait on transfers."""
    name, title, rx_text, tx_text, levers = LINKS[link]
    rate = spec.link_kib_s_each_way(link) if spec else None
    busy, busy_label = _busy(p)
    tx, rx, _ = _link_traffic(p, link)
    if rate is None or busy is None:
        return None
    busiest = max(tx or 0.0, rx or 0.0)
    share = busiest / rate
    if share < LINK_BOUND_SHARE or busy >= SM_WAIT_UTIL_PCT:
        return None
    direction = rx_text if (rx or 0) >= (tx or 0) else tx_text
    evidence = [f"{name} {direction} {busiest * 1024 / 1e9:.1f} GB/s on average, "
                f"{share * 100:.0f} % of the {spec.model}'s published "
                f"{rate * 1024 / 1e9:.0f} GB/s each way",
                f"{busy_label} {busy:.1f} % (below {SM_WAIT_UTIL_PCT:.0f} %): the SMs wait on "
                "transfers"]
    needed = max(1, math.ceil(p.gpus * busy / TARGET_UTIL_PCT))
    if needed < p.gpus:
        freed = (p.gpus - needed) / p.gpus
        effect = _scaled_effect(
            m, -freed, None if m.usd is None else -m.usd * freed,
            unknown="" if m.usd is not None else f"cost unknown: {m.usd_problem}",
            method=(f"upper bound: with the transfers no longer stalling the SMs, the same work "
                    f"fits {needed} of {p.gpus} GPUs at {TARGET_UTIL_PCT:.0f} % "
                    f"({p.gpus} × {busy:.1f} % ÷ {TARGET_UTIL_PCT:.0f} %); the freed "
                    "GPUs' share of the measured month. Not additive with under-utilised."))
    else:
        effect = Effect(unknown="one GPU: faster transfers shorten the work but the GPU stays "
                                "billed; measure the fix as a variant")
    return Diagnosis(f"{link}_bound", title, evidence, list(levers), effect,
                     *_estimate_confidence(conf, "link rate from the datasheet"))


# ---- A smaller or newer GPU ---------------------------------------------------------------

@dataclass(frozen=True)
class Alternative:
    spec: gpu_table.GpuSpec
    instance: gpu_table.InstanceOffer  # the cheapest whole instances holding `gpus`
    instances: int
    ratio: float  # alternative / current capacity of the bound resource
    gpus: int
    util_pct: float
    power_w: float  # per GPU at util_pct
    kwh: float  # per month
    co2e_kg: float
    usd: float
    j_per_inference: float | None
    usd_per_1k: float | None


def _bound_resource(p: Profile) -> tuple[str | None, str]:
    signal = _memory_signal(p)
    if signal is None:
        return None, ("which resource binds is unknown (memory activity not reported): the "
                      "less favourable of the compute and memory-bandwidth ratios")
    if signal[1] >= MEMORY_BOUND_PCT:
        return "memory", f"memory-bandwidth-bound ({signal[1]:.0f} % busy): memory bandwidth"
    return "compute", (f"memory interface {signal[1]:.0f} % busy: dense FP16 tensor "
                       "throughput")


def _ratio(cur: gpu_table.GpuSpec, alt: gpu_table.GpuSpec, resource: str | None
           ) -> float | None:
    keys = [resource] if resource else ["compute", "memory"]
    ratios = []
    for key in keys:
        c, a = cur.capacity(key), alt.capacity(key)
        if not c or a is None:
            return None
        ratios.append(a / c)
    return min(ratios)


def alternatives(p: Profile, m: Monthly, spec: gpu_table.GpuSpec, hosts: list
                 ) -> tuple[list[Alternative], str, str]:
    """Every table GPU priced in the hosts' catalog region and option that holds the measured
    peak memory, with its estimated month at the measured load; and what the estimate rests
    on, or why there is none."""
    resource, resource_text = _bound_resource(p)
    if len({(h.provider, h.region, h.purchase_option) for h in hosts}) != 1:
        return [], resource_text, "the workload's hosts differ in provider, region or option"
    offers = gpu_table.offers(hosts[0])
    if not offers:
        return [], resource_text, (f"the catalog prices no GPU for {hosts[0].provider or 'aws'}"
                                   f" {hosts[0].region or '(no region)'} "
                                   f"{hosts[0].purchase_option}")
    limit = own_limit(p, spec)
    u = p.util_pct
    out = []
    for model, offer in sorted(offers.items()):
        alt = offer.spec
        if model == spec.model or alt.board_power_w is None or alt.memory_mib is None:
            continue
        r = _ratio(spec, alt, resource)
        if not r:
            continue
        plan = max(u, TARGET_UTIL_PCT)
        n = max(1, math.ceil(p.gpus * u / (r * plan) - 1e-9))
        u_alt = p.gpus * u / (r * n)
        need_mib = p.mem_used_max_mib * p.gpus / min(n, p.gpus) * MEMORY_HEADROOM
        if need_mib > alt.memory_mib:
            continue
        watts = power_at(p, alt.board_power_w, u_alt, limit)
        if watts is None:
            continue
        ratio = n * watts / (p.gpus * p.power_w)
        instance, count, usd_h = offer.cheapest(n)
        usd = usd_h * MONTH_H
        out.append(Alternative(
            alt, instance, count, r, n, u_alt, watts, m.kwh * ratio, m.co2e_kg * ratio, usd,
            None if m.j_per_inference is None else m.j_per_inference * ratio,
            usd / m.month_inferences * 1000 if m.month_inferences else None))
    return out, resource_text, ""


def _alternative_gpu(p: Profile, m: Monthly, spec: gpu_table.GpuSpec | None, hosts: list,
                     conf: tuple[str, str], skipped: list[str]) -> Diagnosis | None:
    rule = "smaller or newer GPU"
    missing = [what for what, value in (
        ("utilisation", p.util_pct), ("power", p.power_w),
        ("memory used", p.mem_used_max_mib)) if value is None]
    if missing:
        skipped.append(f"{rule}: {', '.join(missing)} not reported")
        return None
    if spec is None:
        skipped.append(f"{rule}: '{p.gpu_name or 'unnamed GPU'}' is not in the published "
                       "GPU table")
        return None
    if spec.board_power_w is None and p.power_limit_w is None:
        skipped.append(f"{rule}: no published board power for the {spec.model}")
        return None
    if m.usd is None:
        skipped.append(f"{rule}: the current cost is unknown ({m.usd_problem})")
        return None
    resource, _ = _bound_resource(p)
    unpublished = [key for key in ([resource] if resource else ["compute", "memory"])
                   if spec.capacity(key) is None]
    if unpublished:
        what = {"compute": "dense FP16 tensor throughput", "memory": "memory bandwidth"}
        skipped.append(f"{rule}: the {spec.model}'s "
                       f"{' and '.join(what[k] for k in unpublished)} is not published")
        return None
    found, resource_text, why = alternatives(p, m, spec, hosts)
    if why:
        skipped.append(f"{rule}: {why}")
        return None
    better = sorted((a for a in found if a.kwh < m.kwh and a.usd < m.usd),
                    key=lambda a: (a.usd, a.kwh))
    if not better:
        return None
    best = better[0]
    evidence = [
        f"{p.gpus} × {spec.model} at {p.util_pct:.1f} % utilisation, {p.power_w:.0f} W each, "
        f"memory used at most {p.mem_used_max_mib / 1024:.1f} GiB per GPU",
        f"bound resource: {resource_text}",
        f"{best.spec.model}: {best.ratio:.2f}× the {spec.model}'s published capacity, "
        f"{best.spec.memory_gb:.0f} GB, {best.spec.board_power_w:.0f} W board power"]
    levers = [f"{a.gpus} × {a.spec.model} ({a.instances} × {a.instance.instance_type} at "
              f"${a.instance.usd_per_hour:.4f}/h) at {a.util_pct:.0f} %: "
              f"{a.kwh:,.0f} kWh and ${a.usd:,.0f} a month" for a in better[:3]]
    m_per = m.j_per_inference
    method = (
        f"estimate from published figures (data/gpus.csv, each row cites its datasheet): the "
        f"measured load ({p.gpus} GPUs × {p.util_pct:.1f} %) scaled by the ratio of the bound "
        f"resource, packed to at least {TARGET_UTIL_PCT:.0f} % on whole GPUs "
        f"(⌈{p.gpus} × {p.util_pct:.1f} % ÷ ({best.ratio:.3f} × "
        f"{max(p.util_pct, TARGET_UTIL_PCT):.0f} %)⌉ = {best.gpus}); power per GPU "
        f"{best.power_w:.0f} W at {best.util_pct:.0f} % on the measured power line scaled to "
        f"its {best.spec.board_power_w:.0f} W; energy and CO2e scale with total GPU power "
        f"({best.gpus} × {best.power_w:.0f} W against {p.gpus} × {p.power_w:.0f} W measured); "
        f"cost = {best.instances} × {best.instance.instance_type} "
        f"({best.instance.gpu_count} GPU(s) each) × ${best.instance.usd_per_hour:.4f}/h × "
        f"720 h ({best.instance.source}; whole instances, the cheapest holding {best.gpus} "
        f"GPU(s)) against the measured ${m.usd:,.0f}; memory: the measured peak × 1.2 fits its "
        f"{best.spec.memory_gb:.0f} GB. Peak memory counts what the server reserved (vLLM "
        f"holds 90 % by default). Includes packing to {TARGET_UTIL_PCT:.0f} %: not additive "
        "with under-utilised. Check it: run the alternative as a variant.")
    if m_per is not None and best.j_per_inference is not None:
        method += (f" Per inference: {m_per:.3g} J → {best.j_per_inference:.3g} J"
                   + (f", ${m.usd_per_1k:.4f} → ${best.usd_per_1k:.4f} per 1k"
                      if m.usd_per_1k is not None and best.usd_per_1k is not None else "")
                   + ".")
    effect = _scaled_effect(m, best.kwh / m.kwh - 1 if m.kwh else 0.0, best.usd - m.usd,
                            method)
    table = [{"model": a.spec.model, "instance": f"{a.instances} × {a.instance.instance_type}",
              "gpus": a.gpus,
              "util_pct": a.util_pct, "power_w": a.power_w, "kwh": a.kwh, "usd": a.usd,
              "j_per_inference": a.j_per_inference, "usd_per_1k": a.usd_per_1k,
              "ratio": a.ratio, "source_url": a.spec.source_url,
              "retrieved": a.spec.retrieved, "better": a in better}
             for a in sorted(found, key=lambda a: a.usd)]
    return Diagnosis("smaller_gpu", f"A different GPU: {best.spec.model}", evidence, levers,
                     effect, *_estimate_confidence(conf, "published peak figures, not this "
                                                         "model's measured speed"), table)


def advise(workload: Workload, window: windows.Window) -> Advice:
    p = profile(workload, window)
    if not p.enough:
        return Advice(p, None, not_enough=(
            f"{p.measured_minutes} GPU-minutes measured in this range; the advisor needs at "
            f"least {MIN_MEASURED_MINUTES}"))
    m = monthly(workload, p)
    hosts = list({g.host_id: g.host for g in workload.gpu_queryset().select_related("host")
                  }.values())
    spec = gpu_table.find(p.gpu_name)
    if spec is None and hosts:
        from greenops.costs.models import InstanceType

        t = InstanceType.objects.filter(provider=hosts[0].provider or "aws",
                                        name=hosts[0].instance_type).first()
        spec = gpu_table.find(t.gpu_model) if t else None
    advice = Advice(p, m, spec=spec)
    conf = _confidence(p)
    found = _under_utilised(p, m, conf)
    if found:
        advice.diagnoses.append(found)
    if _memory_signal(p) is not None:
        found = _memory_bound(p, m, spec, conf)
        if found:
            advice.diagnoses.append(found)
    else:
        advice.skipped.append(f"memory-bandwidth: memory utilisation reported by "
                              f"{p.mem_util_share * 100:.0f} % of samples, DCGM DRAM "
                              f"activity by {p.dram_share * 100:.0f} %")
    for link in ("pcie", "nvlink"):
        label = LINKS[link][0]
        reported = _link_traffic(p, link)[2]
        if reported < MIN_METRIC_SHARE:
            advice.skipped.append(f"{label}: throughput reported by {reported * 100:.0f} % of "
                                  "samples")
        elif spec is None or spec.link_kib_s_each_way(link) is None:
            advice.skipped.append(f"{label}: the GPU's published link rate is unknown")
        else:
            found = _link_bound(p, m, spec, link, conf)
            if found:
                advice.diagnoses.append(found)
    # Host network and disk throughput are not collected yet: no rule may lean on them.
    advice.skipped.append("host network/disk-bound: host network and disk throughput are not "
                          "collected")
    tradeoff = cap_tradeoff(workload, window) or pair_tradeoff(workload, window)
    if p.throttle_share >= MIN_METRIC_SHARE or tradeoff is not None:
        advice.diagnoses.extend(_throttled(
            p if p.throttle_share >= MIN_METRIC_SHARE else _no_throttle(p), m, spec, tradeoff,
            conf))
    if p.throttle_share < MIN_METRIC_SHARE:
        advice.skipped.append(f"power/thermal throttling: throttle reasons reported by "
                              f"{p.throttle_share * 100:.0f} % of samples")
    found = _alternative_gpu(p, m, spec, hosts, conf, advice.skipped)
    if found:
        advice.diagnoses.append(found)
    return advice


def _no_throttle(p: Profile) -> Profile:
    """The profile with the throttle shares unknown (too few samples reported them)."""
    from dataclasses import replace

    return replace(p, power_capped_share=None, thermal_share=None)


def window(range_key: str, now: dt.datetime | None = None) -> windows.Window:
    """The named range ending at the end of the current hour (whole hour rollups)."""
    return windows.named(range_key, now, windows.HOUR)
