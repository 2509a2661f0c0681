"""What a workload's GPUs measured over a window, and what that is worth per month: the facts
every advisor rule reads (greenops.advisor.diagnose, .powercap, .alternatives).

Plain functions over the GPU rollups (telemetry.GpuHour/GpuMinute). Energy, carbon and cost are
never recomputed here: they come from the one owner of each (greenops.energy.it_energy,
carbon.accounting.carbon_of, costs.accounting.cost_of), and an effect is a stated change of
those measured monthly figures.

Power at another utilisation (used by the alternative-GPU and memory-bound estimates): the
straight line through the measured point (mean utilisation, mean power) and (100 %, the power
limit), clamped to [0, limit] -- one measured point and the published ceiling, nothing else;
where that line would reach 0 W above 0 % busy, the line through 0 W at 0 % and the measured
point.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, Max, Min, Q, Sum

from greenops import windows
from greenops.advisor import gpus as gpu_table
from greenops.carbon.accounting import carbon_of
from greenops.costs.accounting import cost_of
from greenops.energy import it_energy
from greenops.kpis import queries
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
HOST_CPU_BOUND_PCT = 90.0  # the host's CPUs, all cores on average
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
    def nvlink_gb_s(self) -> tuple[float | None, float | None] | None:
        """(TX, RX) in GB/s (10^9 bytes, as datasheets print link rates); None: not reported."""
        if self.nvlink_tx_kib_s is None and self.nvlink_rx_kib_s is None:
            return None
        return tuple(None if v is None else v * 1024 / 1e9
                     for v in (self.nvlink_tx_kib_s, self.nvlink_rx_kib_s))

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
class GpuLink:
    """One GPU's link traffic and busyness over the window (means over the samples that
    reported each; None where none did), with its model's published link rates."""

    host: str
    index: int
    name: str  # the device model as NVML names it
    spec: gpu_table.GpuSpec | None
    busy_pct: float | None  # DCGM SM activity where reported, else NVML utilisation
    busy_source: str  # "sm_active" or "util"
    nvlink_tx_kib_s: float | None
    nvlink_rx_kib_s: float | None
    pcie_tx_kib_s: float | None
    pcie_rx_kib_s: float | None

    def traffic(self, link: str) -> float | None:
        """The busier direction of `link` ("nvlink" or "pcie"), KiB/s."""
        pair = ((self.nvlink_tx_kib_s, self.nvlink_rx_kib_s) if link == "nvlink"
                else (self.pcie_tx_kib_s, self.pcie_rx_kib_s))
        known = [v for v in pair if v is not None]
        return max(known) if known else None

    def rate(self, link: str) -> float | None:
        """The model's published rate of `link`, one direction, KiB/s (None: not published)."""
        return self.spec.link_kib_s_each_way(link) if self.spec else None

    def link_share(self, link: str) -> float | None:
        traffic, rate = self.traffic(link), self.rate(link)
        return None if traffic is None or not rate else traffic / rate


def gpu_links(workload: Workload, window: windows.Window) -> list[GpuLink]:
    """Per GPU of the workload: the figures a communication-bound GPU shows (GPU hour rollups,
    like profile(), one row per GPU)."""
    gpu_ids = list(workload.gpu_queryset().values_list("id", flat=True))
    sums = {r["gpu_id"]: r for r in GpuHour.objects.filter(
        gpu_id__in=gpu_ids, bucket__gte=window.start, bucket__lt=window.end).values(
        "gpu_id").annotate(
        sm_sum=Sum("sm_active_sum"), sm_n=Sum("sm_active_n"), samples=Sum("samples"),
        util_sum=Sum("util_sum"), util_n=Sum("util_n"),
        nvl_tx=Sum("nvlink_tx_sum_kib_s"), nvl_rx=Sum("nvlink_rx_sum_kib_s"),
        nvl_n=Sum("nvlink_n"), tx=Sum("pcie_tx_sum_kib_s"), rx=Sum("pcie_rx_sum_kib_s"),
        pcie_n=Sum("pcie_n"))}
    out = []
    for gpu in Gpu.objects.filter(id__in=gpu_ids).select_related("host").order_by(
            "host__name", "index"):
        a = sums.get(gpu.id)
        if a is None or not a["samples"]:
            continue
        dcgm = _share(a["sm_n"], a["samples"]) >= MIN_METRIC_SHARE
        out.append(GpuLink(
            host=gpu.host.name, index=gpu.index, name=gpu.name, spec=gpu_table.find(gpu.name),
            busy_pct=(_mean(a["sm_sum"], a["sm_n"]) if dcgm
                      else _mean(a["util_sum"], a["util_n"])),
            busy_source="sm_active" if dcgm else "util",
            nvlink_tx_kib_s=_mean(a["nvl_tx"], a["nvl_n"]),
            nvlink_rx_kib_s=_mean(a["nvl_rx"], a["nvl_n"]),
            pcie_tx_kib_s=_mean(a["tx"], a["pcie_n"]), pcie_rx_kib_s=_mean(a["rx"], a["pcie_n"])))
    return out


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


def scaled_effect(m: Monthly, energy_change: float, usd_change: float | None, method: str,
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
    # Communication-bound: each GPU's link traffic against its model's published rate, and
    # what the month's time spent waiting costs (a share of the measured month, not a saving).
    per_gpu: list[dict] = field(default_factory=list)  # diagnose._gpu_row per GpuLink
    waiting: Effect | None = None


@dataclass
class Advice:
    profile: Profile
    monthly: Monthly | None
    diagnoses: list[Diagnosis] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # rules not run, and why
    not_enough: str = ""  # set when nothing may be diagnosed
    spec: gpu_table.GpuSpec | None = None  # the workload's GPU in the published table
    host: object | None = None  # diagnose.HostActivity of the workload's hosts

    @property
    def simulated(self) -> bool:
        return self.profile.simulated_samples > 0


def confidence(p: Profile) -> tuple[str, str]:
    """How much of the window was measured decides how far a mean can be trusted."""
    share = p.measured_s / p.window.span_s if p.window.span_s else 0.0
    text = f"measured {share * 100:.0f} % of the {p.window.label.lower()}"
    if share >= 0.8 and p.measured_s >= 86400:
        return "high", text
    if share >= 0.5:
        return "medium", text
    return "low", text


def estimate_confidence(conf: tuple[str, str], why: str) -> tuple[str, str]:
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


def memory_signal(p: Profile) -> tuple[str, float, str] | None:
    """(source, percent, label) of the memory-interface activity to judge by: DCGM's DRAM
    activity when reported, else NVML's memory utilisation (labelled: it counts the time any
    memory read or write was in flight, a coarser measure). None: neither was reported."""
    if p.dram_share >= MIN_METRIC_SHARE and p.dram_active_pct is not None:
        return "dcgm", p.dram_active_pct, "DRAM interface active (DCGM DRAM_ACTIVE)"
    if p.mem_util_share >= MIN_METRIC_SHARE and p.mem_util_pct is not None:
        return "nvml", p.mem_util_pct, ("memory controller busy (NVML memory utilisation, "
                                        "a coarser measure than DCGM's DRAM activity)")
    return None
