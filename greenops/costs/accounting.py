"""Cost accounting: host-hours x price -> per host, team, workload and training job; idle cost.

Usage comes from GpuHour rollups (never raw samples). A host counts as running in an hour when
any of its GPUs reported in that hour. Commitments (reserved, savings plan) and on-premises
hardware are paid for every hour of the window the host existed (from its enrollment to its
removal) whether it ran or not; on-demand and spot only for hours it ran.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import models
from django.utils import timezone

from greenops.costs.catalog import HourlyPrice, PriceProblem, host_price
from greenops.energy import ItEnergy
from greenops.teams.models import Team
from greenops.telemetry.models import GpuHour, Host, PurchaseOption
from greenops.units import J_PER_KWH

LOOKBACKS_DAYS = (7, 30, 60)
IDLE_UTIL_PCT = 5.0  # below this a GPU-hour is idle: nothing serious runs at <5% SM activity
COMMITTED = (PurchaseOption.RESERVED, PurchaseOption.SAVINGS_PLAN, PurchaseOption.ON_PREM)


# The price of a host in a given hour: what it cost then, or why there is none.
PriceFor = Callable[[Host, dt.datetime], HourlyPrice | PriceProblem | None]


def cached_prices(now: dt.datetime | None = None) -> PriceFor:
    """Catalog prices looked up once per host."""
    seen: dict[int, HourlyPrice | PriceProblem] = {}

    def lookup(host: Host, hour: dt.datetime) -> HourlyPrice | PriceProblem:
        if host.id not in seen:
            seen[host.id] = host_price(host, now)
        return seen[host.id]

    return lookup


@dataclass
class Cost:
    """What a set of GPUs cost over a window; `cost_usd` is None when any host has no price
    (a partial sum shown as the total would be a wrong figure)."""

    cost_usd: float | None = 0.0
    source: str = ""
    problems: list[str] = field(default_factory=list)


def _label(price: HourlyPrice) -> str:
    return f"{price.source} (stale)" if price.stale else price.source


def cost_of(energy: ItEnergy, price: PriceFor | None = None) -> Cost:
    """Each GPU-minute observed costs the host's hourly price / its GPU count / 60."""
    price = price or cached_prices()
    total, sources, missing = 0.0, [], []
    for host_id, minutes in sorted(energy.gpu_minutes_by_host.items()):
        host = energy.hosts[host_id]
        found = price(host, energy.start)
        if not isinstance(found, HourlyPrice):
            missing.append(host.name)
            continue
        total += found.usd_per_hour / max(energy.host_gpu_count.get(host_id, 1), 1) * minutes / 60
        sources.append(_label(found))
    if missing:
        names = sorted(set(missing))
        return Cost(None, "no price for " + ", ".join(names), [f"no price for {n}" for n in names])
    return Cost(total, "; ".join(dict.fromkeys(sources)))


def window(lookback_days: int, now: dt.datetime | None = None) -> tuple[dt.datetime, dt.datetime]:
    """Whole hours: [start, end) with end the start of the current hour."""
    now = now or timezone.now()
    end = now.replace(minute=0, second=0, microsecond=0)
    return end - dt.timedelta(days=lookback_days), end


@dataclass
class GpuUsage:
    gpu_id: int
    host_id: int
    # bucket -> (avg util % or None, energy J, peak memory MiB or None)
    hours: dict[dt.datetime, tuple[float | None, float, float | None]] = field(
        default_factory=dict)

    def idle_hours(self, threshold_pct: float = IDLE_UTIL_PCT) -> int:
        return sum(1 for u, _, _ in self.hours.values() if u is not None and u < threshold_pct)

    @property
    def energy_kwh(self) -> float:
        return sum(e for _, e, _ in self.hours.values()) / J_PER_KWH


def gpu_usage(hosts: list[Host], start: dt.datetime, end: dt.datetime) -> dict[int, GpuUsage]:
    """Per GPU of these hosts: its hourly utilisation, energy and peak memory."""
    gpu_host = {g.id: g.host_id for h in hosts for g in h.gpus.all()}
    out: dict[int, GpuUsage] = {}
    rows = GpuHour.objects.filter(
        gpu_id__in=list(gpu_host), bucket__gte=start, bucket__lt=end, samples__gt=0
    ).values_list("gpu_id", "bucket", "util_sum", "util_n", "energy_j", "mem_used_max_mib")
    for gpu_id, bucket, u_sum, u_n, e_j, mem in rows.iterator(chunk_size=5000):
        usage = out.setdefault(gpu_id, GpuUsage(gpu_id, gpu_host[gpu_id]))
        usage.hours[bucket] = (u_sum / u_n if u_n else None, e_j, mem)
    return out


@dataclass
class HostCost:
    host: Host
    price: HourlyPrice | None
    problem: PriceProblem | None
    running_hours: int
    billed_hours: int
    energy_kwh: float
    gpu_count: int
    cost_usd: float | None = None
    idle_gpu_hours: int = 0
    idle_cost_usd: float | None = None

    @property
    def usd_per_gpu_hour(self) -> float | None:
        if self.price is None or not self.gpu_count:
            return None
        return self.price.usd_per_hour / self.gpu_count


def existing_hours(host: Host, start: dt.datetime, end: dt.datetime) -> set[dt.datetime]:
    """The window's hour buckets in which the host existed for at least part of the hour:
    a commitment or owned hardware is not ours to pay before enrollment or after removal."""
    hour = dt.timedelta(hours=1)
    first = start
    if host.created_at is not None and host.created_at > start:
        # the hour it was enrolled in counts whole, as AWS bills a started hour
        first = max(start, host.created_at.replace(minute=0, second=0, microsecond=0))
    last = min(end, host.removed_at) if host.removed_at is not None else end
    out = set()
    b = first
    while b < last:
        out.add(b)
        b += hour
    return out


def cost_of_hours(price: HourlyPrice, running_hours: int, window_hours: int,
                  energy_kwh: float) -> tuple[float, int]:
    """(cost in $, billed hours) for one host. `window_hours` is what a commitment pays for:
    the hours of the window the host existed. Energy matters only on premises, where the
    electricity bill is ours: GPU energy x PUE x $/kWh (CPU and cooling beyond PUE not counted)."""
    billed = window_hours if price.option in COMMITTED else running_hours
    cost = billed * price.usd_per_hour
    if price.option == PurchaseOption.ON_PREM and price.electricity_usd_per_kwh is not None:
        cost += energy_kwh * (price.pue or 1.0) * price.electricity_usd_per_kwh
    return cost, billed


def host_costs(hosts: list[Host], usage: dict[int, GpuUsage], start: dt.datetime,
               end: dt.datetime, idle_threshold_pct: float = IDLE_UTIL_PCT,
               now: dt.datetime | None = None) -> list[HostCost]:
    by_host: dict[int, list[GpuUsage]] = defaultdict(list)
    for u in usage.values():
        by_host[u.host_id].append(u)
    out = []
    for host in hosts:
        gpus = by_host.get(host.id, [])
        ran = {b for g in gpus for b in g.hours}
        running = len(ran)
        # Hours it reported count as existing too (data replayed from before a re-enrollment).
        window_hours = len(existing_hours(host, start, end) | ran)
        energy = sum(g.energy_kwh for g in gpus)
        result = host_price(host, now)
        price = result if isinstance(result, HourlyPrice) else None
        hc = HostCost(host, price, result if price is None else None, running, 0, energy,
                      len(host.gpus.all()))
        if price is not None:
            hc.cost_usd, hc.billed_hours = cost_of_hours(price, running, window_hours, energy)
            hc.idle_gpu_hours = sum(g.idle_hours(idle_threshold_pct) for g in gpus)
            if hc.usd_per_gpu_hour is not None:
                hc.idle_cost_usd = hc.idle_gpu_hours * hc.usd_per_gpu_hour
        out.append(hc)
    return out


def workload_cost(gpu_ids: set[int], usage: dict[int, GpuUsage],
                  host_rows: dict[int, HostCost]) -> tuple[float | None, int]:
    """GPU-hours of the workload's GPUs x each host's per-GPU hourly price. None when any of
    its hosts has no price: a partial sum shown as the total would be a wrong figure."""
    total = 0.0
    gpu_hours = 0
    for gpu_id in gpu_ids:
        u = usage.get(gpu_id)
        if u is None:
            continue
        rate = host_rows[u.host_id].usd_per_gpu_hour if u.host_id in host_rows else None
        if rate is None:
            return None, gpu_hours
        gpu_hours += len(u.hours)
        total += len(u.hours) * rate
    return total, gpu_hours


@dataclass
class TeamUsage:
    team: Team
    lookback_days: int
    start: dt.datetime
    end: dt.datetime
    hosts: list[Host]
    usage: dict[int, GpuUsage]
    rows: list[HostCost]

    @property
    def window_hours(self) -> int:
        return int((self.end - self.start).total_seconds() // 3600)


def collect(team: Team, lookback_days: int, now: dt.datetime | None = None,
            idle_threshold_pct: float = IDLE_UTIL_PCT) -> TeamUsage:
    start, end = window(lookback_days, now)
    hosts = list(team.hosts.prefetch_related("gpus"))
    usage = gpu_usage(hosts, start, end)
    rows = host_costs(hosts, usage, start, end, idle_threshold_pct, now)
    return TeamUsage(team, lookback_days, start, end, hosts, usage, rows)


def team_costs(tu: TeamUsage, idle_threshold_pct: float = IDLE_UTIL_PCT) -> dict:
    by_id = {r.host.id: r for r in tu.rows}
    workloads = []
    for w in tu.team.workloads.all():
        ids = set(w.gpu_queryset().values_list("id", flat=True))
        cost, gpu_hours = workload_cost(ids, tu.usage, by_id)
        workloads.append({"slug": w.slug, "name": w.name, "kind": w.kind,
                          "gpu_hours": gpu_hours, "cost_usd": cost})
    priced = [r for r in tu.rows if r.cost_usd is not None]
    # Training jobs are accounted by greenops.kpis.jobs with this app's hourly_price(); the
    # figures are read here, not recomputed, so the two pages cannot disagree.
    jobs = [
        {"id": j.id, "name": j.name, "workload": j.workload.name, "running": j.running,
         "started_at": j.started_at.isoformat(), "gpu_hours": j.gpu_hours,
         "cost_usd": j.cost_usd, "cost_source": j.cost_source}
        for j in tu.team.training_jobs.filter(started_at__lt=tu.end)
        .filter(models.Q(stopped_at__isnull=True) | models.Q(stopped_at__gte=tu.start))
        .select_related("workload")[:100]
    ]
    problems = [r.problem.message for r in tu.rows if r.problem is not None]
    return {
        "team": tu.team.slug,
        "lookback_days": tu.lookback_days,
        "start": tu.start.isoformat(),
        "end": tu.end.isoformat(),
        "method": "host-hours from GPU hourly rollups x catalog price for the host's purchase "
                  "option; commitments and owned hardware billed for every hour of the window "
                  "the host existed",
        # No total when a host has no price: a partial sum shown as the total would be wrong.
        "total_cost_usd": sum(r.cost_usd for r in priced) if not problems else None,
        "priced_cost_usd": sum(r.cost_usd for r in priced),
        "idle_cost_usd": sum(r.idle_cost_usd or 0.0 for r in priced),
        "idle_threshold_pct": idle_threshold_pct,
        "stale_prices": any(r.price.stale for r in priced),
        "problems": problems,
        "hosts": [host_row_dict(r) for r in tu.rows],
        "workloads": workloads,
        "training_jobs": jobs,
    }


def host_row_dict(r: HostCost) -> dict:
    p = r.price
    return {
        "host": r.host.name, "host_id": r.host.id, "instance_type": r.host.instance_type,
        "region": r.host.region, "purchase_option": r.host.purchase_option,
        "running_hours": r.running_hours, "billed_hours": r.billed_hours,
        "energy_kwh": r.energy_kwh, "cost_usd": r.cost_usd,
        "idle_gpu_hours": r.idle_gpu_hours, "idle_cost_usd": r.idle_cost_usd,
        "usd_per_hour": p.usd_per_hour if p else None,
        "price_source": p.source if p else None,
        "price_as_of": p.as_of.isoformat() if p and p.as_of else None,
        "price_stale": p.stale if p else None,
        "problem": r.problem.message if r.problem else None,
        "problem_code": r.problem.code if r.problem else None,
    }
