"""KPI arithmetic on sums: merging rollup rows and deriving the per-unit figures.

Pure functions on plain numbers (no database): tests feed hand-computed totals. The database
side (greenops.kpis.measure, greenops.kpis.rollup) produces Totals; pages and the API derive
KPIs with `derive`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields

from greenops import windows
from greenops.kpis import histogram, timings
from greenops.units import J_PER_KWH


@dataclass
class Totals:
    """Sums over a set of GPUs/hosts and inference windows. Field names match KpiRollup."""

    requests: int = 0
    success: int = 0
    failure: int = 0
    tokens: int | None = None
    token_requests: int = 0
    latency_sum_ms: float = 0.0
    latency_n: int = 0
    latency_buckets: dict = field(default_factory=dict)
    prompt_tokens: int | None = None
    server_energy_j: float | None = None
    timings: dict = field(default_factory=dict)
    # Seconds the inference windows covered; None when a window had no start (unknown).
    measured_s: float | None = 0.0
    util_sum: float = 0.0
    util_n: int = 0
    gpu_minutes: int = 0
    gpu_energy_j: float = 0.0
    cpu_ram_energy_j: float = 0.0
    cpu_ram_method: str = ""
    facility_energy_j: float = 0.0
    co2e_g: float = 0.0
    cost_usd: float | None = 0.0
    cost_source: str = ""
    # Per-inference figures divide these: the energy, carbon and cost of the GPUs serving
    # inference. None: this row's own figures are its inference figures (a workload row).
    # When inference_energy_j is set, inference_cost_usd None means "no price".
    inference_energy_j: float | None = None
    inference_co2e_g: float | None = None
    inference_cost_usd: float | None = None
    pue_source: str = ""
    intensity_source: str = ""
    simulated: bool = False
    # Team rows: host-hours with a GPU sample, and of them those outside the host's
    # enrollment (KpiRollup.hosts_measured); None on workload rows.
    hosts_measured: int | None = None
    hosts_unenrolled: int | None = None

    @property
    def energy_j(self) -> float:
        """IT energy: GPU + CPU + RAM, before PUE."""
        return self.gpu_energy_j + self.cpu_ram_energy_j

    def inference_figures(self) -> tuple[float, float, float | None]:
        """(energy J, CO2e g, cost $ or None) of the GPUs serving the counted inferences."""
        if self.inference_energy_j is None:
            return self.energy_j, self.co2e_g, self.cost_usd
        return self.inference_energy_j, self.inference_co2e_g or 0.0, self.inference_cost_usd

    @property
    def pue(self) -> float | None:
        """Effective PUE: facility / IT energy (the energy-weighted PUE of the hosts)."""
        return self.facility_energy_j / self.energy_j if self.energy_j else None

    @property
    def intensity_g_per_kwh(self) -> float | None:
        """Effective grid intensity: g CO2e per facility kWh, weighted by energy."""
        kwh = self.facility_energy_j / J_PER_KWH
        return self.co2e_g / kwh if kwh else None

    def as_row(self) -> dict:
        """Column values for a KpiRollup row."""
        row = {f.name: getattr(self, f.name) for f in fields(self)}
        row["latency_buckets"] = histogram.to_json(self.latency_buckets)
        row["timings"] = timings.merge([self.timings])
        row["pue"] = self.pue
        row["intensity_g_per_kwh"] = self.intensity_g_per_kwh
        return row


def _join(values: Iterable[str]) -> str:
    # Sources are joined, deduplicated, so a merged figure still names everything it used.
    parts: list[str] = []
    for v in values:
        for p in v.split("; "):
            if p and p not in parts:
                parts.append(p)
    return "; ".join(parts)[:300]


def _inference_figures(r) -> tuple[float, float, float | None]:
    """Totals.inference_figures for Totals and KpiRollup rows alike."""
    if r.inference_energy_j is None:
        return r.gpu_energy_j + r.cpu_ram_energy_j, r.co2e_g, r.cost_usd
    return r.inference_energy_j, r.inference_co2e_g or 0.0, r.inference_cost_usd


def merge(items: Iterable) -> Totals:
    """Merge Totals or KpiRollup rows (anything with the Totals fields) exactly."""
    out = Totals()
    items = list(items)
    for r in items:
        out.requests += r.requests
        out.success += r.success
        out.failure += r.failure
        if r.tokens is not None:
            out.tokens = (out.tokens or 0) + r.tokens
        out.token_requests += r.token_requests
        if r.prompt_tokens is not None:
            out.prompt_tokens = (out.prompt_tokens or 0) + r.prompt_tokens
        if r.server_energy_j is not None:
            out.server_energy_j = (out.server_energy_j or 0.0) + r.server_energy_j
        out.latency_sum_ms += r.latency_sum_ms
        out.latency_n += r.latency_n
        out.util_sum += r.util_sum
        out.util_n += r.util_n
        out.gpu_minutes += r.gpu_minutes
        out.gpu_energy_j += r.gpu_energy_j
        out.cpu_ram_energy_j += r.cpu_ram_energy_j
        out.facility_energy_j += r.facility_energy_j
        out.co2e_g += r.co2e_g
        out.simulated = out.simulated or r.simulated
        for name in ("hosts_measured", "hosts_unenrolled"):
            if getattr(r, name) is not None:
                setattr(out, name, (getattr(out, name) or 0) + getattr(r, name))
    # Buckets do not overlap, so their measured seconds add up; one unknown makes the sum
    # unknown (a rate over a partly known time would be too high).
    measured = [r.measured_s for r in items]
    out.measured_s = None if None in measured else float(sum(measured))
    out.latency_buckets = histogram.merge(r.latency_buckets for r in items)
    out.timings = timings.merge(r.timings for r in items)
    # One hour without a price makes the sum unknown: never show a partial cost as the cost.
    if any(r.cost_usd is None for r in items):
        out.cost_usd = None
    else:
        out.cost_usd = sum(r.cost_usd or 0.0 for r in items)
    if any(r.inference_energy_j is not None for r in items):
        parts = [_inference_figures(r) for r in items]
        out.inference_energy_j = sum(e for e, _, _ in parts)
        out.inference_co2e_g = sum(c for _, c, _ in parts)
        out.inference_cost_usd = (None if any(u is None for _, _, u in parts)
                                  else sum(u for _, _, u in parts))
    for name in ("cost_source", "pue_source", "intensity_source", "cpu_ram_method"):
        setattr(out, name, _join(getattr(r, name) for r in items))
    return out


def _ratio(num: float | None, den: float | None, scale: float = 1.0) -> float | None:
    if num is None or not den:
        return None
    return num / den * scale


def derive(t: Totals, period_s: float) -> dict:
    """Every KPI of the issue from one set of totals over a period of `period_s` seconds.

    Rates (throughput, token rates) divide by the seconds actually measured (t.measured_s),
    never by the period: a service measured for one minute of a day did its requests in that
    minute. `coverage` says how much of the period was measured ("measured 1 min of 24 h")."""
    energy_kwh = t.energy_j / J_PER_KWH
    inf_energy_j, inf_co2e_g, inf_cost_usd = t.inference_figures()
    measured_s = t.measured_s
    cover = windows.coverage(measured_s, period_s)
    k = {
        "measured_s": measured_s,
        "period_s": period_s,
        "coverage": cover["text"],
        "coverage_share": cover["share"],
        "requests": t.requests,
        "success": t.success,
        "failure": t.failure,
        "tokens": t.tokens,
        "gpu_util_pct": _ratio(t.util_sum, t.util_n),
        "gpu_hours": t.gpu_minutes / 60,
        "gpu_energy_kwh": t.gpu_energy_j / J_PER_KWH,
        "cpu_ram_energy_kwh": t.cpu_ram_energy_j / J_PER_KWH,
        "cpu_ram_method": t.cpu_ram_method,
        "energy_kwh": energy_kwh,
        "facility_energy_kwh": t.facility_energy_j / J_PER_KWH,
        "pue": t.pue,
        "pue_source": t.pue_source,
        "intensity_g_per_kwh": t.intensity_g_per_kwh,
        "intensity_source": t.intensity_source,
        "co2e_kg": t.co2e_g / 1000,
        "cost_usd": t.cost_usd,
        "cost_source": t.cost_source if t.cost_usd is not None or t.cost_source else "no price",
        "throughput_per_s": _ratio(t.requests, measured_s),
        "latency_p50_ms": histogram.quantile_ms(t.latency_buckets, 0.50),
        "latency_p99_ms": histogram.quantile_ms(t.latency_buckets, 0.99),
        "latency_p99_above": histogram.above_bounds(t.latency_buckets, 0.99),
        "latency_p50_above": histogram.above_bounds(t.latency_buckets, 0.50),
        "latency_mean_ms": _ratio(t.latency_sum_ms, t.latency_n),
        "prompt_tokens": t.prompt_tokens,
        # Token rates over the same measured seconds as throughput (vLLM's token counters).
        "generation_tokens_per_s": _ratio(t.tokens, measured_s),
        "prompt_tokens_per_s": _ratio(t.prompt_tokens, measured_s),
        "timings": timings.summary(t.timings),
        # What the inference server itself counted (Triton nv_energy_consumption): a
        # cross-check beside gpu_energy_kwh, never part of the accounting.
        "server_energy_kwh": _ratio(t.server_energy_j, J_PER_KWH),
        # Per-inference figures use IT energy (GPU + CPU + RAM) for joules, as measured at the
        # host, and facility energy for carbon, which is what the grid supplied -- of the GPUs
        # serving inference only: a team's training energy is not divided by its inferences.
        "inference_energy_kwh": inf_energy_j / J_PER_KWH,
        "energy_per_inference_j": _ratio(inf_energy_j, t.requests),
        "co2e_per_1k_inferences_g": _ratio(inf_co2e_g, t.requests, 1000),
        # Only the energy share of the requests whose windows counted tokens.
        "energy_per_token_j": _ratio(_ratio(inf_energy_j * t.token_requests, t.requests),
                                     t.tokens),
        "cost_per_1k_inferences_usd": _ratio(inf_cost_usd, t.requests, 1000),
        "simulated": t.simulated,
        "unknown": {},  # figure key -> why it is None
    }
    if t.cost_usd is None:
        k["unknown"]["cost_usd"] = k["cost_source"] or "no price"
        if t.requests:
            k["unknown"]["cost_per_1k_inferences_usd"] = k["unknown"]["cost_usd"]
    _unknown_per_inference(k, t, inf_energy_j)
    return k


# Unknown is not zero: a figure with no data is None, and `unknown` (in every derive() result)
# names why. Zero only when zero was measured.
PER_INFERENCE = ("energy_per_inference_j", "co2e_per_1k_inferences_g", "energy_per_token_j",
                 "cost_per_1k_inferences_usd")
GPU_FIGURES = ("gpu_energy_kwh", "cpu_ram_energy_kwh", "energy_kwh", "facility_energy_kwh",
               "co2e_kg", "gpu_util_pct", "inference_energy_kwh")
NO_GPU_DATA = "no GPU data: none of the workload GPUs reported in this window"
NO_GPUS = "no GPUs assigned to the workload"


def _unknown_per_inference(k: dict, t: Totals, inf_energy_j: float) -> None:
    """Inferences counted but no joule measured for the GPUs serving them: the per-inference
    figures are unknown, never 0 J and $0."""
    if t.requests and not inf_energy_j and not t.gpu_minutes:
        for key in PER_INFERENCE:
            k[key] = None
            k["unknown"][key] = "no GPU data for the GPUs serving these inferences"


def without_gpu_data(k: dict, has_gpus: bool = True) -> dict:
    """A workload's figures when none of its GPUs reported: energy, carbon, utilisation and the
    per-inference figures are unknown with the reason; cost stays what the cost model says (a
    committed host is paid for whether it reported or not), unless it has no GPUs at all."""
    if k.get("gpu_hours") or k.get("gpu_energy_kwh"):
        return k
    reason = NO_GPU_DATA if has_gpus else NO_GPUS
    keys = GPU_FIGURES + PER_INFERENCE + (() if has_gpus else ("cost_usd",))
    for key in keys:
        k[key] = None
        k["unknown"][key] = reason
    return k


def change_pct(current: float | None, previous: float | None) -> float | None:
    """Change against the previous period, in percent; None when there is nothing to compare."""
    if current is None or not previous:
        return None
    return (current - previous) / previous * 100
