"""The efficiency advisor: a workload's measured bottleneck and what pulling a lever would save.

The rules, in order of trust:

* nothing is diagnosed from less than MIN_MEASURED_MINUTES of measured GPU minutes;
* a rule that needs a metric runs only when that metric was reported for at least
  MIN_METRIC_SHARE of the samples (a GPU that does not support it gives no diagnosis, not a
  wrong one); the page lists the rules that were skipped and why;
* an effect that cannot be computed from measurements is unknown with its reason, never 0;
* an effect computed from published figures (GPU datasheets in data/gpus.csv, a paper's
  power-cap curve) is labelled an estimate with its method and source.

What was measured and its monthly worth: greenops.advisor.measure. Power caps and throttling:
.powercap. Another GPU model: .alternatives. Under-utilised, memory-bound and link-bound here.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, replace

from django.db.models import Sum

from greenops import windows
from greenops.advisor import gpus as gpu_table
from greenops.advisor.alternatives import alternative_gpu
from greenops.advisor.measure import (
    HOST_CPU_BOUND_PCT,
    LINK_BOUND_SHARE,
    MEMORY_BOUND_PCT,
    MIN_MEASURED_MINUTES,
    MIN_METRIC_SHARE,
    SM_WAIT_UTIL_PCT,
    TARGET_UTIL_PCT,
    TENSOR_IDLE_PCT,
    UNDER_UTIL_PCT,
    Advice,
    Diagnosis,
    Effect,
    GpuLink,
    Monthly,
    Profile,
    confidence,
    estimate_confidence,
    gpu_links,
    memory_signal,
    monthly,
    own_limit,
    power_at,
    profile,
    scaled_effect,
)
from greenops.advisor.measure import RANGES as RANGES  # the pages' range choices
from greenops.advisor.powercap import cap_tradeoff, pair_tradeoff, throttled
from greenops.costs.models import InstanceType
from greenops.telemetry.models import HostHour
from greenops.units import plural
from greenops.workloads.models import Workload, WorkloadKind


def _under_utilised(p: Profile, m: Monthly, conf: tuple[str, str]) -> Diagnosis | None:
    if p.util_pct is None or p.util_pct >= UNDER_UTIL_PCT:
        return None
    needed = max(1, math.ceil(p.gpus * p.util_pct / TARGET_UTIL_PCT))
    evidence = [f"mean GPU utilisation {p.util_pct:.1f} % over {plural(p.gpus, 'GPU')} "
                f"(below {UNDER_UTIL_PCT:.0f} %)"]
    if p.power_w is not None:
        evidence.append(f"mean power {p.power_w:.0f} W per GPU")
    levers = ["batch requests (dynamic batching) so each GPU does more per wake-up",
              "autoscale replicas to the load"]
    if needed < p.gpus:
        share = (p.gpus - needed) / p.gpus
        levers.insert(0, f"serve the measured load on {needed} of {plural(p.gpus, 'GPU')}")
        effect = scaled_effect(
            m, -share, None if m.usd is None else -m.usd * share,
            unknown="" if m.usd is not None else f"cost unknown: {m.usd_problem}",
            method=(f"{plural(p.gpus, 'GPU')} × {p.util_pct:.1f} % ÷ "
                    f"{TARGET_UTIL_PCT:.0f} % target = "
                    f"{plural(needed, 'GPU')}; the {p.gpus - needed} freed GPUs' share "
                    f"({share * 100:.0f} %) of the measured monthly energy, CO2e and cost. "
                    "An upper bound: the remaining GPUs draw more when busier."))
    else:
        levers.insert(0, "a smaller GPU, or sharing this GPU with another workload")
        effect = Effect(unknown="one GPU cannot be consolidated further; what batching saves "
                                "depends on the model: measure it as a variant (see the "
                                "smaller-GPU estimate where one fits)")
    return Diagnosis("under_utilised", "Under-utilised GPUs", evidence, levers, effect, *conf)


def _memory_bound(p: Profile, m: Monthly, spec: gpu_table.GpuSpec | None,
                  conf: tuple[str, str]) -> Diagnosis | None:
    signal = memory_signal(p)
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
    conf2 = estimate_confidence(conf, "an upper bound from halved bytes, not a measurement")
    if half_w is None or not now_w:
        effect = Effect(unknown="the power line needs the measured utilisation, power and "
                                "power limit (or the GPU's published board power)")
    else:
        change = half_w / now_w - 1
        effect = scaled_effect(
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

# ---- Input- or communication-bound --------------------------------------------------------

COMMUNICATION_LEVERS = [
    "overlap collectives with compute (bucketed all-reduce, async tensor parallel)",
    "compress what is exchanged: bf16/fp8 gradients, PowerSGD or 1-bit Adam",
    "fewer, larger exchanges: a bigger per-GPU batch or gradient accumulation",
    "place the job on NVLink-connected GPUs (one NVLink domain per tensor-parallel group)",
    "fewer GPUs: each then computes more per byte exchanged (see the effect below)"]
LINKS = {
    "pcie": ("PCIe", "Input-bound (PCIe)", "host → GPU (RX)", "GPU → host (TX)",
             ["feed from pinned memory with more data-loader workers and prefetch",
              "keep tensors on the GPU between steps; move pre-processing onto the GPU",
              "place the job where its GPUs share a faster link (NVLink, PCIe Gen5)"]),
    "nvlink": ("NVLink", "Communication-bound (NVLink)", "received (RX)", "sent (TX)",
               COMMUNICATION_LEVERS),
}
# Multi-GPU training on GPUs without NVLink exchanges its gradients over PCIe: the same
# signature there is communication as much as input.
PCIE_COMMUNICATION = ("Communication- or input-bound (PCIe, no NVLink)",
                      [*COMMUNICATION_LEVERS[:4], LINKS["pcie"][4][0], COMMUNICATION_LEVERS[4]])


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


def _unstalled_effect(p: Profile, m: Monthly, busy: float, cause: str, faster: str) -> Effect:
    """What a stalled workload's month would save once `cause`: its GPUs' busy share, packed to
    the target utilisation on fewer GPUs, frees the rest (an upper bound). One GPU frees
    nothing: the fix shortens the work while the GPU stays billed."""
    needed = max(1, math.ceil(p.gpus * busy / TARGET_UTIL_PCT))
    if needed >= p.gpus:
        return Effect(unknown=f"one GPU: {faster} the work but the GPU stays billed; measure "
                              "the fix as a variant")
    freed = (p.gpus - needed) / p.gpus
    return scaled_effect(
        m, -freed, None if m.usd is None else -m.usd * freed,
        unknown="" if m.usd is not None else f"cost unknown: {m.usd_problem}",
        method=(f"upper bound: with {cause}, the same work fits {needed} of "
                f"{plural(p.gpus, 'GPU')} at "
                f"{TARGET_UTIL_PCT:.0f} % ({p.gpus} × {busy:.1f} % ÷ {TARGET_UTIL_PCT:.0f} %); "
                "the freed GPUs' share of the measured month. Not additive with "
                "under-utilised."))


def _waiting(m: Monthly, busy: float, busy_label: str, name: str) -> Effect:
    """What the month's time with the SMs idle costs: that time share of the measured month
    (the one energy, carbon and cost accounting, scaled like every effect)."""
    wait = max(0.0, 1 - busy / 100)
    return scaled_effect(
        m, wait, None if m.usd is None else m.usd * wait, basis="measured",
        unknown="" if m.usd is not None else f"cost unknown: {m.usd_problem}",
        method=(f"the SMs idle {wait * 100:.1f} % of the measured time ({busy_label} "
                f"{busy:.1f} %) while {name} is near its rate: that share of the measured "
                "month's energy, CO2e and cost. A time share: an idle GPU draws less than a "
                "busy one, so energy and CO2e are upper bounds; hourly-billed cost is exact."))


def _gpu_row(g: GpuLink, link: str) -> dict:
    """One GPU's line of the per-GPU table: GB/s (10^9 bytes) as datasheets print them."""
    tx, rx = ((g.nvlink_tx_kib_s, g.nvlink_rx_kib_s) if link == "nvlink"
              else (g.pcie_tx_kib_s, g.pcie_rx_kib_s))
    share = g.link_share(link)
    rate = g.rate(link)

    def gb_s(kib_s: float | None) -> float | None:
        return None if kib_s is None else kib_s * 1024 / 1e9

    return {"gpu": f"{g.host} · {g.index}", "model": g.name, "busy_pct": g.busy_pct,
            "busy_label": "SM active" if g.busy_source == "sm_active" else "utilisation",
            "tx_gb_s": gb_s(tx), "rx_gb_s": gb_s(rx), "rate_gb_s": gb_s(rate),
            "share_pct": None if share is None else share * 100,
            "bound": (share or 0) >= LINK_BOUND_SHARE and g.busy_pct is not None
                     and g.busy_pct < SM_WAIT_UTIL_PCT}


def _link_bound(p: Profile, m: Monthly, spec: gpu_table.GpuSpec | None, link: str,
                conf: tuple[str, str], gpus: list[GpuLink] | None = None,
                kind: str = "") -> Diagnosis | None:
    """The link moving at least LINK_BOUND_SHARE of its published per-direction rate on
    average while the SMs stay below SM_WAIT_UTIL_PCT busy: the SMs wait on transfers.
    `gpus`: each GPU's figures, judged against its own model's rate (the page's per-GPU
    table); `kind`: the workload's kind (multi-GPU training over PCIe is communication)."""
    name, title, rx_text, tx_text, levers = LINKS[link]
    gpus = gpus or []
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
    if (link == "pcie" and p.gpus >= 2 and kind == WorkloadKind.TRAINING
            and not spec.nvlink_gb_s):
        title, levers = PCIE_COMMUNICATION
    rows = [_gpu_row(g, link) for g in gpus]
    if len(rows) >= 2:
        evidence.append(f"{sum(r['bound'] for r in rows)} of {len(rows)} GPUs each moved at "
                        f"least {LINK_BOUND_SHARE * 100:.0f} % of their model's published "
                        f"{name} rate while below {SM_WAIT_UTIL_PCT:.0f} % busy (per GPU "
                        "below)")
    effect = _unstalled_effect(p, m, busy, "the transfers no longer stalling the SMs",
                               "faster transfers shorten")
    d = Diagnosis(f"{link}_bound", title, evidence, list(levers), effect,
                  *estimate_confidence(conf, "link rate from the datasheet"))
    return replace(d, per_gpu=rows, waiting=_waiting(m, busy, busy_label, name))

@dataclass(frozen=True)
class HostActivity:
    """The workload's hosts over the window (HostHour, time-weighted): means over the seconds
    each figure was measured; None where it was not reported."""

    hosts: int
    cpu_s: float
    cpu_util_pct: float | None
    net_s: float
    net_rx_bytes_s: float | None
    net_tx_bytes_s: float | None
    disk_s: float
    disk_read_bytes_s: float | None
    disk_write_bytes_s: float | None

    # MB/s (10^6 bytes) for the page.
    @property
    def mb_s(self) -> dict[str, float | None]:
        return {k: None if v is None else v / 1e6 for k, v in (
            ("net_rx", self.net_rx_bytes_s), ("net_tx", self.net_tx_bytes_s),
            ("disk_read", self.disk_read_bytes_s), ("disk_write", self.disk_write_bytes_s))}


def host_activity(host_ids: list[int], window: windows.Window) -> HostActivity:
    a = HostHour.objects.filter(host_id__in=host_ids, bucket__gte=window.start,
                                bucket__lt=window.end).aggregate(
        cpu_s=Sum("cpu_s"), busy=Sum("cpu_busy_s"), net_s=Sum("net_s"),
        rx=Sum("net_rx_bytes"), tx=Sum("net_tx_bytes"), disk_s=Sum("disk_s"),
        rd=Sum("disk_read_bytes"), wr=Sum("disk_write_bytes"))
    cpu_s, net_s, disk_s = a["cpu_s"] or 0.0, a["net_s"] or 0.0, a["disk_s"] or 0.0

    def per_s(total: float | None, seconds: float) -> float | None:
        return total / seconds if seconds else None

    busy = per_s(a["busy"], cpu_s)
    return HostActivity(len(host_ids), cpu_s, None if busy is None else busy * 100, net_s,
                        per_s(a["rx"], net_s), per_s(a["tx"], net_s), disk_s,
                        per_s(a["rd"], disk_s), per_s(a["wr"], disk_s))


def _host_cpu_bound(p: Profile, m: Monthly, h: HostActivity,
                    conf: tuple[str, str]) -> Diagnosis | None:
    """The hosts' CPUs busy at least HOST_CPU_BOUND_PCT while the GPUs wait: the data loader
    or pre-processing on the CPU sets the pace."""
    busy, busy_label = _busy(p)
    if h.cpu_util_pct is None or busy is None:
        return None
    if h.cpu_util_pct < HOST_CPU_BOUND_PCT or busy >= SM_WAIT_UTIL_PCT:
        return None
    evidence = [f"host CPU {h.cpu_util_pct:.1f} % busy on average (all CPUs, at least "
                f"{HOST_CPU_BOUND_PCT:.0f} %)",
                f"{busy_label} {busy:.1f} % (below {SM_WAIT_UTIL_PCT:.0f} %): the GPUs wait "
                "on the host"]
    if h.net_rx_bytes_s is not None:
        evidence.append(f"network in {h.net_rx_bytes_s / 1e6:.1f} MB/s, out "
                        f"{h.net_tx_bytes_s / 1e6:.1f} MB/s")
    if h.disk_read_bytes_s is not None:
        evidence.append(f"disk read {h.disk_read_bytes_s / 1e6:.1f} MB/s, write "
                        f"{h.disk_write_bytes_s / 1e6:.1f} MB/s")
    levers = ["move decoding and augmentation onto the GPU (e.g. NVIDIA DALI) or cache "
              "pre-processed data", "a host with more CPUs per GPU",
              "profile the input pipeline: the loader, not the model, sets the pace"]
    effect = _unstalled_effect(p, m, busy, "the host no longer holding the GPUs back",
                               "a faster input pipeline shortens")
    return Diagnosis("host_cpu_bound", "Input-bound (host CPU)", evidence, levers, effect,
                     *estimate_confidence(conf, "host CPU averaged over all cores"))


def _host_rules(p: Profile, m: Monthly, host_ids: list[int], conf: tuple[str, str],
                advice: Advice) -> None:
    h = advice.host = host_activity(host_ids, p.window)
    wanted = p.measured_s * len(host_ids)  # host-seconds the GPUs were measured over
    cpu_cover = h.cpu_s / wanted if wanted else 0.0
    if cpu_cover < MIN_METRIC_SHARE:
        advice.skipped.append(f"host CPU: reported for {min(cpu_cover, 1) * 100:.0f} % of the "
                              "measured time")
    else:
        found = _host_cpu_bound(p, m, h, conf)
        if found:
            advice.diagnoses.append(found)
    # Bytes per second alone cannot say "saturated": the NIC's and disks' capacities are not
    # collected, so no rule judges them (their figures are evidence beside the CPU rule).
    advice.skipped.append("host network/disk-bound: the NIC's and disks' capacities are not "
                          "collected, so saturation is not judged")


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
        t = InstanceType.objects.filter(provider=hosts[0].provider or "aws",
                                        name=hosts[0].instance_type).first()
        spec = gpu_table.find(t.gpu_model) if t else None
    advice = Advice(p, m, spec=spec)
    conf = confidence(p)
    found = _under_utilised(p, m, conf)
    if found:
        advice.diagnoses.append(found)
    if memory_signal(p) is not None:
        found = _memory_bound(p, m, spec, conf)
        if found:
            advice.diagnoses.append(found)
    else:
        advice.skipped.append(f"memory-bandwidth: memory utilisation reported by "
                              f"{p.mem_util_share * 100:.0f} % of samples, DCGM DRAM "
                              f"activity by {p.dram_share * 100:.0f} %")
    links = gpu_links(workload, window) if p.gpus >= 2 else []
    for link in ("pcie", "nvlink"):
        label = LINKS[link][0]
        reported = _link_traffic(p, link)[2]
        if reported < MIN_METRIC_SHARE:
            advice.skipped.append(f"{label}: throughput reported by {reported * 100:.0f} % of "
                                  "samples")
        elif spec is None or spec.link_kib_s_each_way(link) is None:
            advice.skipped.append(f"{label}: the GPU's published link rate is unknown")
        else:
            found = _link_bound(p, m, spec, link, conf, links, workload.kind)
            if found:
                advice.diagnoses.append(found)
    _host_rules(p, m, [h.id for h in hosts], conf, advice)
    tradeoff = cap_tradeoff(workload, window) or pair_tradeoff(workload, window)
    if p.throttle_share >= MIN_METRIC_SHARE or tradeoff is not None:
        advice.diagnoses.extend(throttled(
            p if p.throttle_share >= MIN_METRIC_SHARE else _no_throttle(p), m, spec, tradeoff,
            conf))
    if p.throttle_share < MIN_METRIC_SHARE:
        advice.skipped.append(f"power/thermal throttling: throttle reasons reported by "
                              f"{p.throttle_share * 100:.0f} % of samples")
    found = alternative_gpu(p, m, spec, hosts, conf, advice.skipped)
    if found:
        advice.diagnoses.append(found)
    return advice

def _no_throttle(p: Profile) -> Profile:
    """The profile with the throttle shares unknown (too few samples reported them)."""
    return replace(p, power_capped_share=None, thermal_share=None)

def window(range_key: str, now: dt.datetime | None = None) -> windows.Window:
    """The figures' period (windows.period): whole finished hours, as every page counts."""
    return windows.period(range_key, now)
