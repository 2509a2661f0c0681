"""The one door from alerts to the KPI engine: every figure a rule looks at comes through here.

Nothing is computed in this module beyond choosing the window and picking keys: team and
workload figures come from greenops.kpis.queries (KPI rollups), host and GPU figures from
greenops.kpis.measure, idle GPU-hours and idle cost from greenops.costs.accounting. Over whole
hours, a team's or a host's idle figures and a host's spend are its cost rows from
greenops.costs.month_cost, the summed path the Costs page, the team home and the monthly report
read (one answer per figure), and an unknown spend follows the report's partial-sum rule. When
those modules change their interface (core's windows, the costs helper's energy/carbon/cost
owners), this is the file that changes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field

from django.utils import timezone

from greenops import windows
from greenops.alerts.rule_kpis import BUDGET_KPIS, KPIS, WINDOWS, Kpi  # noqa: F401 (re-exported)
from greenops.costs import accounting, month_cost
from greenops.kpis import measure, metrics, queries
from greenops.kpis.models import Period
from greenops.teams.models import Team
from greenops.telemetry.models import Gpu, Host
from greenops.workloads.models import Workload

HOUR = dt.timedelta(hours=1)


ESTIMATED_CPU = {"cpu_load", "tdp", "constant"}
ESTIMATED_RAM = {"model", "constant"}


def team_tz(team: Team) -> dt.tzinfo:
    """Days, months, digests and mute windows are the team's (Team.time_zone)."""
    return team.tz


def month_start(now: dt.datetime, tz: dt.tzinfo) -> dt.datetime:
    """Local midnight on the 1st, as greenops.windows defines a team's calendar month."""
    return windows.month_containing(now, getattr(tz, "key", "UTC")).start.astimezone(dt.UTC)


def window_bounds(key: str, now: dt.datetime, tz: dt.tzinfo) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) in UTC, ending at the last whole hour. "day" and "month" are the team's
    calendar period so far (greenops.windows.calendar_so_far): start == end in its first
    hour, an empty window that holds a rule's state rather than a lack of data."""
    label, span = WINDOWS[key]
    if span is not None:
        end = windows.floor_hour(now)
        return end - span, end
    part = calendar(key, now, tz)
    return part.start, part.end


def over(key: str) -> str:
    """The window as words after "over": "the last whole hour", "today so far (...)"."""
    label = WINDOWS[key][0]
    return label if key in ("day", "month") else f"the {label}"


def calendar(key: str, now: dt.datetime, tz: dt.tzinfo) -> windows.CalendarSoFar:
    return windows.calendar_so_far(key, now, getattr(tz, "key", "UTC"))


@dataclass
class Scope:
    team: Team
    host: Host | None = None
    gpu: Gpu | None = None
    workload: Workload | None = None

    @classmethod
    def of(cls, rule) -> Scope:
        return cls(rule.team, rule.host, rule.gpu, rule.workload)

    def gpus(self) -> list[Gpu]:
        if self.gpu is not None:
            return [self.gpu]
        if self.host is not None:
            return list(self.host.gpus.select_related("host"))
        if self.workload is not None:
            return list(self.workload.gpu_queryset().select_related("host"))
        return list(Gpu.objects.filter(host__team=self.team).select_related("host"))


@dataclass
class Figure:
    """One KPI value over one window, with what it is made of. value None: unknown, and
    `reason` says why (never a 0 standing in for "no data")."""

    kpi: str
    value: float | None
    start: dt.datetime
    end: dt.datetime
    reason: str = ""
    requests: int = 0
    simulated: bool = False
    estimated: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def unit(self) -> str:
        return KPIS[self.kpi].unit

    def as_json(self) -> dict:
        d = asdict(self)
        d["start"], d["end"] = self.start.isoformat(), self.end.isoformat()
        d["unit"] = self.unit
        d["measured"] = not self.estimated
        return d


def _derived(scope: Scope, start: dt.datetime, end: dt.datetime) -> dict:
    if scope.host is None and scope.gpu is None:
        return queries.kpis(scope.team, scope.workload, start, end, Period.HOUR)
    totals = measure.measure_gpus(scope.gpus(), start, end, measure.cached_factors())
    return metrics.derive(totals, (end - start).total_seconds())


def _estimates(kpi: Kpi, d: dict) -> list[str]:
    out = []
    methods = d.get("cpu_ram_method") or ""
    if kpi.group in ("energy", "carbon") and methods:
        used = {m.strip() for part in methods.split(";") for m in
                part.replace("CPU", "").replace("RAM", "").split(",")}
        if used & (ESTIMATED_CPU | ESTIMATED_RAM):
            out.append(f"CPU/RAM energy estimated by codecarbon ({methods})")
    if kpi.group == "carbon" and "default" in (d.get("pue_source") or "").lower():
        out.append(f"PUE assumed: {d['pue_source']}")
    if kpi.group == "cost" and "stale" in (d.get("cost_source") or ""):
        out.append(f"price snapshot is stale ({d['cost_source']})")
    return out


def _whole_hosts(scope: Scope, start: dt.datetime, end: dt.datetime
                 ) -> dict[int, month_cost.HostMonth] | None:
    """month_cost's rows of the scope's hosts when the scope is whole hosts (a team or a host)
    over whole hours at the standard threshold, else None (the per-hour path answers)."""
    if scope.gpu is not None or scope.workload is not None or not month_cost.fast_path(start,
                                                                                         end):
        return None
    # A team's hosts as its report reads them (removed ones included: they were paid for).
    hosts = Host.objects.filter(id=scope.host.id) if scope.host is not None else \
        Host.objects.filter(team=scope.team)
    return month_cost.host_months(list(hosts.prefetch_related("gpus").order_by("id")), start,
                                  end, now=end, gpu_minutes=False)


def _unpriced(kpi: str, rows: list[accounting.HostCost], field: str, start: dt.datetime,
              end: dt.datetime) -> Figure:
    """The partial-sum rule (as a report's totals give it): unknown, the priced hosts' sum as a
    lower bound and the unpriced hosts named."""
    unpriced = [r for r in rows if getattr(r, field) is None]
    known = sum(getattr(r, field) for r in rows if getattr(r, field) is not None)
    s = "" if len(unpriced) == 1 else "s"
    names = ", ".join(f"{r.host.name} ({r.problem.message if r.problem else 'no price'})"
                      for r in unpriced)
    return Figure(kpi, None, start, end,
                  reason=f"≥ ${known:,.2f} from priced hosts; {len(unpriced)} host{s} "
                         f"unpriced: {names}")


def _idle_summed(kpi: str, months: dict[int, month_cost.HostMonth], start: dt.datetime,
                 end: dt.datetime) -> Figure:
    # The hosts of GPUs that reported in the window: with an hour rollup, or minutes counted
    # from minute rollups alone (gpu_usage's GPUs).
    used = [m.cost for m in months.values()
            if m.cost.running_hours or any(s.util_minutes for s in m.spans)]
    if not used:
        return Figure(kpi, None, start, end, reason="no GPU-hours measured in the window")
    basis = f"GPU-hours under {accounting.IDLE_UTIL_PCT:g}% utilisation"
    if kpi == "idle_gpu_hours":
        return Figure(kpi, float(sum(r.idle_gpu_hours for r in used)), start, end,
                      sources={"method": basis})
    if any(r.idle_cost_usd is None for r in used):
        return _unpriced(kpi, used, "idle_cost_usd", start, end)
    stale = [r.host.name for r in used if r.price is not None and r.price.stale]
    return Figure(kpi, float(sum(r.idle_cost_usd for r in used)), start, end,
                  sources={"method": basis + " x host price per GPU-hour in force in each hour"},
                  estimated=[f"stale price for {', '.join(stale)}"] if stale else [])


def _report_rows(months: dict[int, month_cost.HostMonth]) -> list[accounting.HostCost]:
    """The cost rows a report sums: hosts that ran, were paid for or drew energy."""
    return [m.cost for m in months.values() if m.cost.in_window]


def _spend_summed(months: dict[int, month_cost.HostMonth], start: dt.datetime,
                  end: dt.datetime) -> Figure:
    """Spend of whole hosts: the sum of their cost rows, as a report's total is."""
    rows = _report_rows(months)
    if not rows:
        return Figure("cost_usd", None, start, end, reason="no measurements in the window")
    if any(r.cost_usd is None for r in rows):
        return _unpriced("cost_usd", rows, "cost_usd", start, end)
    source = "; ".join(dict.fromkeys(m.cost_source for m in months.values() if m.cost_source))
    f = Figure("cost_usd", float(sum(r.cost_usd for r in rows)), start, end,
               sources={"cost_source": source} if source else {})
    f.estimated = _estimates(KPIS["cost_usd"], {"cost_source": source})
    return f


def _idle(scope: Scope, kpi: str, start: dt.datetime, end: dt.datetime) -> Figure:
    months = _whole_hosts(scope, start, end)
    if months is not None:
        return _idle_summed(kpi, months, start, end)
    gpus = scope.gpus()
    hosts = list({g.host_id: g.host for g in gpus}.values())
    usage = accounting.gpu_usage(hosts, start, end)
    rows = {r.host.id: r for r in accounting.host_costs(hosts, usage, start, end)}
    wanted = [usage[g.id] for g in gpus if g.id in usage]
    if not wanted:
        return Figure(kpi, None, start, end, reason="no GPU-hours measured in the window")
    hours = sum(u.idle_hours() for u in wanted)
    basis = f"GPU-hours under {accounting.IDLE_UTIL_PCT:g}% utilisation"
    if kpi == "idle_gpu_hours":
        return Figure(kpi, float(hours), start, end, sources={"method": basis})
    cost = 0.0
    for u in wanted:
        rate = rows[u.host_id].usd_per_gpu_hour
        if rate is None:
            problem = rows[u.host_id].problem
            why = problem.message if problem else "no price"
            return Figure(kpi, None, start, end, reason=f"{rows[u.host_id].host.name}: {why}")
        cost += u.idle_hours() * rate
    stale = [r.host.name for r in rows.values() if r.price is not None and r.price.stale]
    return Figure(kpi, cost, start, end, sources={"method": basis + " x host price per GPU-hour"},
                  estimated=[f"stale price for {', '.join(stale)}"] if stale else [])


def figure(scope: Scope, kpi_key: str, start: dt.datetime, end: dt.datetime) -> Figure:
    """The KPI `kpi_key` of `scope` over [start, end)."""
    kpi = KPIS[kpi_key]
    if kpi_key in ("idle_gpu_hours", "idle_cost_usd"):
        return _idle(scope, kpi_key, start, end)
    if end <= start:
        return Figure(kpi_key, None, start, end, reason="the window has not started yet")
    # A host's spend from its cost row (a team's is its KPI rollups: the same cost model,
    # summed per hour when they were written).
    if kpi_key == "cost_usd" and scope.host is not None and (
            months := _whole_hosts(scope, start, end)) is not None:
        return _spend_summed(months, start, end)
    d = _derived(scope, start, end)
    sources = {k: d[k] for k in ("cost_source", "pue_source", "intensity_source",
                                 "cpu_ram_method") if d.get(k)}
    f = Figure(kpi_key, d.get(kpi_key), start, end, requests=int(d.get("requests") or 0),
               simulated=bool(d.get("simulated")), estimated=_estimates(kpi, d), sources=sources)
    measured_any = (d.get("gpu_hours") or 0) > 0 or (d.get("energy_kwh") or 0) > 0 or f.requests
    if not measured_any:
        f.value, f.reason = None, "no measurements in the window"
    elif f.value is None:
        if kpi_key.startswith("cost") or kpi_key == "cost_per_1k_inferences_usd":
            f.reason = d.get("cost_source") or "no price"
            rows = _report_rows(_whole_hosts(scope, start, end) or {}) \
                if kpi_key == "cost_usd" else []
            if any(r.cost_usd is None for r in rows):
                # The partial-sum rule, as the report, the Costs page and the team home give
                # it: the priced hosts' sum as a lower bound and the unpriced hosts named.
                f.reason = _unpriced(kpi_key, rows, "cost_usd", start, end).reason
        elif kpi.per_inference:
            f.reason = "no inferences counted in the window"
        else:
            f.reason = "not measured in the window"
    return f


def daily(scope: Scope, kpi_key: str, now: dt.datetime, tz: dt.tzinfo) -> list[Figure]:
    """One figure per complete local day of the current month, oldest first."""
    return [figure(scope, kpi_key, start, end)
            for start, end in windows.local_days(month_start(now, tz), now, tz)]


def hosts_last_seen(scope: Scope) -> list[tuple[str, dt.datetime | None]]:
    """(host name, last sample time) for the scope's hosts that are not removed."""
    if scope.host is not None:
        hosts = [scope.host]
    elif scope.gpu is not None:
        hosts = [scope.gpu.host]
    elif scope.workload is not None:
        hosts = list({g.host_id: g.host for g in scope.gpus()}.values())
    else:
        hosts = list(Host.objects.filter(team=scope.team, removed_at__isnull=True))
    return [(h.name, h.last_seen) for h in hosts]


def now() -> dt.datetime:
    return timezone.now()
