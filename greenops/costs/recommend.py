"""Purchase-option recommendations as pure functions over measured usage and prices.

No database here: callers pass hourly usage and rates, tests pass hand-made ones. Every result
carries monthly dollars and percent saved, risk, the energy and CO2e effect, and its reasoning.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from greenops.carbon.accounting import effect_of_it_kwh
from greenops.costs.models import HOURS_PER_MONTH, INTERRUPTION_BANDS
from greenops.units import plural

RESTART_MIN = 10.0  # time to get a replacement spot instance running and reload a checkpoint
UNKNOWN_BAND = ">20%"  # without a Spot Instance Advisor band, plan for the worst one
MEMORY_HEADROOM = 1.2  # a smaller GPU must hold the measured peak memory plus 20%


@dataclass
class Recommendation:
    kind: str  # commit, no_commitment, spot, stay_on_demand, stop_idle, consolidate, rightsize
    subject: str
    title: str
    monthly_usd_saved: float
    pct_saved: float
    risk: str  # low, medium, high
    kwh_per_month: float  # change in energy; negative means less
    co2e_kg_per_month: float | None  # None where no grid intensity is known
    reasoning: str
    method: str = "estimate: measured GPU-hour usage over the lookback x catalog prices"
    detail: dict = field(default_factory=dict)


def facility_effect(it_kwh: float, pue: float, intensity_g_per_kwh: float | None
                    ) -> tuple[float, float | None]:
    """(facility kWh, kg CO2e) of an IT-energy change: the carbon app's formula, PUE once."""
    return effect_of_it_kwh(it_kwh, pue, intensity_g_per_kwh)


@dataclass(frozen=True)
class CommitOption:
    label: str  # e.g. "Reserved 3y no upfront"
    usd_per_hour: float
    term_years: int


def break_even_utilisation(commit_usd_per_hour: float, on_demand_usd_per_hour: float) -> float:
    """The share of hours an instance must run for a commitment to cost less than on-demand."""
    return commit_usd_per_hour / on_demand_usd_per_hour


def commitment_level(hourly_counts: list[int], break_even: float) -> int:
    """The number of instances to commit to: the c-th committed instance pays off when at least
    c instances ran in a break-even share of the hours."""
    hours = len(hourly_counts)
    level = 0
    for c in range(1, max(hourly_counts, default=0) + 1):
        if sum(1 for n in hourly_counts if n >= c) / hours >= break_even:
            level = c
    return level


def cost_with_commitment(hourly_counts: list[int], level: int, commit_usd: float,
                         on_demand_usd: float) -> float:
    return sum(level * commit_usd + max(0, n - level) * on_demand_usd for n in hourly_counts)


def commitment(subject: str, hourly_counts: list[int], on_demand_usd_per_hour: float,
               options: list[CommitOption]) -> Recommendation:
    """Reserved/savings-plan level from the hourly distribution of running instances.
    `hourly_counts` has one entry per hour of the lookback, zero where nothing ran."""
    hours = len(hourly_counts)
    current = sum(hourly_counts) * on_demand_usd_per_hour
    to_month = HOURS_PER_MONTH / hours
    busy = sum(1 for n in hourly_counts if n > 0) / hours
    results = []
    for opt in options:
        be = break_even_utilisation(opt.usd_per_hour, on_demand_usd_per_hour)
        level = commitment_level(hourly_counts, be)
        new = cost_with_commitment(hourly_counts, level, opt.usd_per_hour,
                                   on_demand_usd_per_hour)
        results.append((current - new, opt, be, level))
    alternatives = [{"option": o.label, "break_even_utilisation": be, "level": lvl,
                     "monthly_usd_saved": s * to_month} for s, o, be, lvl in results]
    # Share of hours with at least c instances running, c = 1..peak: the curve the break-even
    # lines are read against (and what the page plots).
    curve = [sum(1 for n in hourly_counts if n >= c) / hours
             for c in range(1, max(hourly_counts, default=0) + 1)]
    best = max((r for r in results if r[3] > 0), key=lambda r: r[0], default=None)
    if best is None or best[0] <= 0:
        lowest = min((r[2] for r in results), default=None)
        why = (f"At least one instance ran in {busy:.0%} of the hours; the cheapest commitment "
               f"breaks even at {lowest:.0%}." if lowest is not None
               else "No commitment prices are in the catalog for this instance type.")
        return Recommendation(
            "no_commitment", subject, f"No commitment for {subject}", 0.0, 0.0, "low", 0.0,
            0.0, why + " Commitments would cost more than on-demand for this usage; stay "
            "on-demand, or on spot where the work can be interrupted.",
            detail={"alternatives": alternatives, "busy_share": busy,
                    "share_at_least": curve},
        )
    saved, opt, be, level = best
    risk = "high" if opt.term_years >= 3 else "medium"
    steady = sum(1 for n in hourly_counts if n >= level) / hours
    return Recommendation(
        "commit", subject, f"Commit to {level} x {subject} ({opt.label})",
        saved * to_month, saved / current * 100 if current else 0.0, risk, 0.0, 0.0,
        f"{level} instance(s) ran in {steady:.0%} of the hours; {opt.label} at "
        f"${opt.usd_per_hour:.4f}/h breaks even at {be:.0%} use against "
        f"${on_demand_usd_per_hour:.4f}/h on-demand. The same hardware runs either way, so "
        "energy and CO2e do not change. "
        f"Risk: you pay for {opt.term_years} year(s) even if the work stops.",
        detail={"alternatives": alternatives, "level": level, "break_even_utilisation": be,
                "share_at_least": curve},
    )


ASSUMED_BAND = (" (assumed: no Spot Instance Advisor band known; an operator loads them with "
                "manage.py load_spot_advisor)")


def spot_overhead(band: str, checkpoint_interval_min: float, restart_min: float = RESTART_MIN
                  ) -> float:
    """Extra work as a share of run time: interruptions per hour x work lost per interruption
    (half a checkpoint interval on average, plus the restart)."""
    per_hour = INTERRUPTION_BANDS[band] / HOURS_PER_MONTH
    return per_hour * (checkpoint_interval_min / 2 + restart_min) / 60


@dataclass(frozen=True)
class WorkloadTraits:
    name: str
    kind: str  # inference, training, batch
    interruptible: bool
    checkpoint_interval_min: int | None
    latency_critical: bool


def spot_fit(w: WorkloadTraits, on_demand_usd_per_hour: float, spot_usd_per_hour: float | None,
             band: str, instance_hours_per_month: float, kwh_per_month: float,
             intensity_g_per_kwh: float | None, pue: float = 1.0) -> Recommendation | None:
    """Spot for interruptible work, net of the work redone after interruptions; on-demand for
    latency-critical serving. None when the workload says nothing either way. `kwh_per_month`
    is IT energy; the redone work's facility energy and CO2e come from the carbon app's formula
    with `pue` (1.0: the caller passed facility energy)."""
    od_monthly = on_demand_usd_per_hour * instance_hours_per_month
    if w.latency_critical:
        return Recommendation(
            "stay_on_demand", w.name, f"Keep {w.name} on on-demand (or committed) capacity",
            0.0, 0.0, "low", 0.0, 0.0,
            f"{w.name} serves latency-critical requests: a spot interruption gives only two "
            "minutes' notice and would drop requests. Its savings belong in a commitment, not "
            "in spot.",
        )
    if not w.interruptible:
        return None
    if w.kind == "training" and not w.checkpoint_interval_min:
        return Recommendation(
            "stay_on_demand", w.name, f"Add checkpoints before moving {w.name} to spot",
            0.0, 0.0, "low", 0.0, 0.0,
            f"{w.name} is marked interruptible but has no checkpoint interval: an interruption "
            "would lose the whole run. Checkpoint it, then it can move to spot.",
        )
    if spot_usd_per_hour is None:
        return Recommendation(
            "spot", w.name, f"{w.name} fits spot, but there is no spot price to size it", 0.0,
            0.0, "medium", 0.0, 0.0,
            "No spot price is in the catalog for this instance type and region (spot prices "
            "come only from a refresh with AWS credentials), so no saving is claimed.",
            detail={"missing": "spot_price"},
        )
    band_known = band in INTERRUPTION_BANDS
    used_band = band if band_known else UNKNOWN_BAND
    overhead = spot_overhead(used_band, w.checkpoint_interval_min or 0)
    effective = spot_usd_per_hour * (1 + overhead)
    saved = (on_demand_usd_per_hour - effective) * instance_hours_per_month
    extra_kwh, extra_co2e = facility_effect(overhead * kwh_per_month, pue, intensity_g_per_kwh)
    risk = {"<5%": "low", "5-10%": "low", "10-15%": "medium"}.get(used_band, "high")
    lost = (f"half a {w.checkpoint_interval_min}-minute checkpoint interval"
            if w.checkpoint_interval_min else "the batch items in flight")
    detail = {"overhead_share": overhead, "effective_usd_per_hour": effective,
              "band": used_band, "band_assumed": not band_known, "net_monthly_usd": saved}
    if saved <= 0:
        # Spot can cost more than on-demand (a scarce type in a busy zone), and the redone
        # work can eat a thin discount: a loss is never advice to move.
        return Recommendation(
            "stay_on_demand", w.name, f"Spot does not pay for {w.name}", 0.0, 0.0, "low", 0.0,
            0.0,
            f"{w.name} could run on spot, but spot at ${spot_usd_per_hour:.4f}/h plus "
            f"{overhead:.3%} redone work (interruption band {used_band}"
            f"{'' if band_known else ', assumed'}) comes to ${effective:.4f}/h against "
            f"${on_demand_usd_per_hour:.4f}/h on-demand: it would cost "
            f"${-saved:.2f} more a month. Stay on on-demand.",
            detail=detail,
        )
    return Recommendation(
        "spot", w.name, f"Run {w.name} on spot", saved, saved / od_monthly * 100 if od_monthly
        else 0.0, risk, extra_kwh, extra_co2e,
        f"{w.name} can be interrupted. Spot at ${spot_usd_per_hour:.4f}/h against "
        f"${on_demand_usd_per_hour:.4f}/h on-demand; with interruption band {used_band}"
        f"{'' if band_known else ASSUMED_BAND} each "
        f"interruption loses {lost} plus {RESTART_MIN:.0f} minutes to restart, "
        f"{overhead:.3%} extra run time, which also costs that much more energy.",
        detail=detail,
    )


def stop_idle(host: str, option: str, host_usd_per_hour: float | None, gpu_count: int,
              idle_hours: int, idle_kw: float, pue: float, intensity_g_per_kwh: float | None,
              instance_hours_per_month: float) -> Recommendation:
    """Every GPU of the host under the idle threshold for each of the last `idle_hours` hours.
    Stopping saves the hours the host actually runs (`instance_hours_per_month`, measured and
    scaled to a month), not a full month; `idle_kw` is the measured draw of its GPUs."""
    kwh, co2e = facility_effect(-idle_kw * instance_hours_per_month, pue, intensity_g_per_kwh)
    # A commitment is paid whether the host runs or not: stopping saves energy, not dollars.
    pays_per_hour = option in ("on_demand", "spot")
    saved = (host_usd_per_hour or 0.0) * instance_hours_per_month if pays_per_hour else 0.0
    return Recommendation(
        "stop_idle", host, f"Stop {host}: its GPUs have been idle for {plural(idle_hours, 'hour')}",
        saved, 100.0 if saved else 0.0, "low", kwh, co2e,
        f"All {plural(gpu_count, 'GPU')} of {host} stayed under the idle threshold for the last "
        f"{plural(idle_hours, 'hour')} while drawing {idle_kw * 1000:.0f} W; it runs about "
        f"{instance_hours_per_month:.0f} h a month."
        + ("" if pays_per_hour else " It is on a commitment, so stopping saves energy and "
           "CO2e but not dollars; move other work onto it instead."),
    )


@dataclass(frozen=True)
class HostLoad:
    """One host of a consolidation group (same instance type, region and purchase option)."""

    name: str
    gpu_count: int
    idle_gpu_count: int  # idle in every one of the last hours checked
    idle_kw: float  # measured draw of the idle GPUs together
    usd_per_hour: float
    hours_per_month: float  # measured running hours scaled to a month


def consolidate(subject: str, option: str, hosts: list[HostLoad], pue: float,
                intensity_g_per_kwh: float | None) -> Recommendation | None:
    """Partly idle hosts with no smaller instance to move to (the caller tries rightsizing
    first). An instance is billed whole, so idle GPUs save dollars only when the busy GPUs of
    the group fit on fewer hosts and a whole host can be stopped; otherwise only the idle
    GPUs' energy is claimed. None when no GPU is idle."""
    idle_gpus = sum(h.idle_gpu_count for h in hosts)
    if not idle_gpus:
        return None
    busy = sum(h.gpu_count - h.idle_gpu_count for h in hosts)
    # Keep the largest hosts, and among equals the dearest to run: the hosts freed are then
    # the smaller, surer saving.
    ranked = sorted(hosts, key=lambda h: (-h.gpu_count, -h.usd_per_hour * h.hours_per_month,
                                          h.name))
    kept, capacity = 0, 0
    while capacity < busy:
        capacity += ranked[kept].gpu_count
        kept += 1
    freed = ranked[kept:]
    pays_per_hour = option in ("on_demand", "spot")
    total_usd = sum(h.usd_per_hour * h.hours_per_month for h in hosts)
    names = ", ".join(h.name for h in hosts)
    risk = "medium"
    if freed:
        saved = sum(h.usd_per_hour * h.hours_per_month for h in freed) if pays_per_hour else 0.0
        # The GPUs switched off are the idle capacity that disappears, at the measured idle draw.
        kw_per_idle_gpu = sum(h.idle_kw for h in hosts) / idle_gpus
        it_kwh = -sum(kw_per_idle_gpu * h.gpu_count * h.hours_per_month for h in freed)
        freed_names = ", ".join(h.name for h in freed)
        title = (f"Consolidate workloads onto fewer hosts: free {len(freed)} of {len(hosts)} "
                 f"({subject})")
        why = (f"{plural(busy, 'GPU')} {'is' if busy == 1 else 'are'} busy across {names} "
               f"({idle_gpus} idle for days); they fit on {plural(kept, 'host')}, so "
               f"{freed_names} can be stopped once its work moves.")
        if not pays_per_hour:
            why += (" These hosts are on a commitment, so stopping one saves energy and CO2e "
                    "but not dollars until the commitment ends.")
    else:
        saved, it_kwh = 0.0, -sum(h.idle_kw * h.hours_per_month for h in hosts)
        title = f"Consolidate workloads onto fewer hosts ({subject})"
        why = (f"{plural(idle_gpus, 'GPU')} on {names} stayed idle for days, but the busy GPUs "
               "need every host and no smaller instance of this GPU family in the catalog fits the "
               "work, so no dollars are claimed: the instance is billed whole. The energy "
               "figure is the idle GPUs' measured draw, put to use by moving work from other "
               "hosts onto them.")
    kwh, co2e = facility_effect(it_kwh, pue, intensity_g_per_kwh)
    return Recommendation(
        "consolidate", subject, title, saved,
        saved / total_usd * 100 if saved and total_usd else 0.0, risk, kwh, co2e, why,
        detail={"hosts": [h.name for h in hosts], "freed": [h.name for h in freed],
                "busy_gpus": busy, "idle_gpus": idle_gpus},
    )


@dataclass(frozen=True)
class InstanceOffer:
    name: str
    gpu_model: str
    gpu_count: int
    gpu_memory_gib: float
    usd_per_hour: float


def gpu_family(gpu_model: str) -> str:
    """"NVIDIA A100 80GB" -> "nvidia a100": the architecture, without the memory size."""
    return " ".join(gpu_model.lower().split()[:2])


def rightsize(host: str, current: InstanceOffer, used_gpus: int, peak_mem_gib: float | None,
              candidates: list[InstanceOffer], instance_hours_per_month: float,
              unused_gpu_kw: float, pue: float, intensity_g_per_kwh: float | None
              ) -> Recommendation | None:
    """The cheapest instance of the same GPU family with enough GPUs for the ones actually used
    and enough memory per GPU for the measured peak; None when nothing cheaper fits or memory
    was not measured."""
    if peak_mem_gib is None or used_gpus == 0:
        return None
    need_mem = peak_mem_gib * MEMORY_HEADROOM
    # Same GPU family only (A100 80GB -> A100 40GB, not A10G -> T4): a slower GPU could cost
    # more per unit of work than it saves per hour, and we have no throughput figures for it.
    fits = [c for c in candidates if gpu_family(c.gpu_model) == gpu_family(current.gpu_model)
            and c.gpu_count >= used_gpus and c.gpu_memory_gib >= need_mem
            and c.usd_per_hour < current.usd_per_hour and c.name != current.name]
    if not fits:
        return None
    best = min(fits, key=lambda c: (c.usd_per_hour, c.name))
    saved = (current.usd_per_hour - best.usd_per_hour) * instance_hours_per_month
    removed = max(0, current.gpu_count - best.gpu_count)
    kwh, co2e = facility_effect(-unused_gpu_kw * HOURS_PER_MONTH if removed else 0.0, pue,
                                intensity_g_per_kwh)
    return Recommendation(
        "rightsize", host, f"Move {host} from {current.name} to {best.name}", saved,
        (current.usd_per_hour - best.usd_per_hour) / current.usd_per_hour * 100, "medium", kwh,
        co2e,
        f"{host} used {used_gpus} of {current.gpu_count} {current.gpu_model} "
        f"GPU{'' if current.gpu_count == 1 else 's'}, peaking at "
        f"{peak_mem_gib:.1f} GiB; {best.name} has {best.gpu_count} x {best.gpu_model} with "
        f"{best.gpu_memory_gib:.0f} GiB each (20% headroom kept) at ${best.usd_per_hour:.4f}/h "
        f"instead of ${current.usd_per_hour:.4f}/h. Check throughput on the new GPU before "
        "switching: a different GPU model may run slower.",
        detail={"to": best.name},
    )
