"""A team's month in figures: every number a report shows, read from the KPI engine and the cost
model, never recomputed here.

This module is the only place the reports app looks figures up (KPIs, per-host energy, cost,
jobs, recommendations, calendar months), so when those owners move, switching is a one-file
change. The result is a plain JSON-able dict: it is what a Report row stores, and the page, the
API, the CSV and the PDF all render that same dict, so they cannot disagree.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from django.db import models
from django.utils import timezone

from greenops import windows
from greenops.alerts.models import Rule, RuleEvent, State
from greenops.carbon.models import HostSite
from greenops.costs import month_cost
from greenops.costs.accounting import HostCost, gpu_usage, host_costs
from greenops.costs.team_recommendations import BASIS_DAYS, team_recommendations
from greenops.errors import invalid
from greenops.kpis import metrics
from greenops.kpis import queries as kpi_queries
from greenops.kpis.measure import cached_factors, measure_gpus
from greenops.kpis.models import Period
from greenops.teams.models import Team
from greenops.telemetry.models import Gpu, GpuHour, Host, PurchaseOption
from greenops.units import J_PER_KWH
from greenops.workloads.jobs import summary
from greenops.workloads.models import TrainingJob, WorkloadKind

# Bumped whenever a figure's definition changes; stored in every report and CSV row.
METHODOLOGY_VERSION = "2026.11.1"
# Version of the figures dict (and the CSV columns derived from it).
SCHEMA_VERSION = 1

# Cloud providers: their emissions are the customer's Scope 3 (category 1, purchased goods and
# services), since the provider, not the team, buys the electricity.
CLOUD_PROVIDERS = ("aws", "gcp", "azure")

TOTAL_KEYS = ("gpu_energy_kwh", "cpu_ram_energy_kwh", "energy_kwh", "facility_energy_kwh",
              "co2e_kg", "co2e_market_kg", "cost_usd", "requests", "gpu_hours",
              "gpu_util_pct", "idle_gpu_hours", "idle_cost_usd")

Progress = Callable[[int, str], None]


# --- Calendar months in the team's time zone -------------------------------------------------

@dataclass(frozen=True)
class Month:
    year: int
    month: int

    @classmethod
    def parse(cls, value: str, field: str = "month") -> Month:
        m = re.fullmatch(r"(\d{4})-(\d{2})", (value or "").strip())
        if not m or not 1 <= int(m.group(2)) <= 12 or int(m.group(1)) < 2000:
            raise invalid(field, "must be a calendar month written YYYY-MM, e.g. 2026-10")
        return cls(int(m.group(1)), int(m.group(2)))

    @classmethod
    def of(cls, day: dt.date) -> Month:
        return cls(day.year, day.month)

    def __str__(self) -> str:
        return f"{self.year:04d}-{self.month:02d}"

    @property
    def first_day(self) -> dt.date:
        return dt.date(self.year, self.month, 1)

    @property
    def label(self) -> str:
        return f"{calendar.month_name[self.month]} {self.year}"

    def next(self) -> Month:
        return Month(self.year + (self.month == 12), self.month % 12 + 1)

    def previous(self) -> Month:
        return Month(self.year - (self.month == 1), (self.month - 2) % 12 + 1)


def team_zone_name(team: Team) -> str:
    """The team's IANA time zone (Team.time_zone, validated when it is set)."""
    return team.time_zone or "UTC"


def team_zone(team: Team) -> ZoneInfo:
    return ZoneInfo(team_zone_name(team))


def month_window(team: Team, month: Month, zone: str | None = None
                 ) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) of a calendar month in the team's time zone (or `zone`), as UTC instants."""
    w = windows.calendar_month(month.year, month.month, zone or team_zone_name(team))
    return w.start, w.end


def current_month(team: Team, now: dt.datetime | None = None) -> Month:
    return Month.of((now or timezone.now()).astimezone(team_zone(team)).date())


# --- The figures -----------------------------------------------------------------------------

def _kpis(team: Team, workload, start: dt.datetime, end: dt.datetime) -> dict:
    # Hour rollups: exact at any whole-hour month boundary (every zone but the :30/:45 ones).
    return kpi_queries.kpis(team, workload, start, end, Period.HOUR)


def _hours_with_data(team: Team, start: dt.datetime, end: dt.datetime) -> int:
    return kpi_queries.rows(team, None, Period.HOUR, start, end).count()


def _scope(host: Host) -> str:
    if host.provider in CLOUD_PROVIDERS:
        return "Scope 3 (cat. 1, cloud)"
    return "Scope 2 (own site)"


def _host_site(host: Host):
    hs = HostSite.objects.filter(host=host).select_related("site").first()
    return hs.site if hs is not None else None


def _market_factor(site) -> tuple[float, str, int | None] | None:
    """A supplier-specific factor (g CO2e/kWh, source, year) where the site records one."""
    if site is None or site.supplier_intensity_g_per_kwh is None:
        return None
    return (site.supplier_intensity_g_per_kwh, site.supplier_intensity_source,
            site.supplier_intensity_year)


def _embodied_g_per_gpu_hour(site) -> float | None:
    return site.embodied_co2e_g_per_gpu_hour if site is not None else None


# month_cost.host_months of a window, kept for the report's other readers of that window.
Seen = dict[tuple[dt.datetime, dt.datetime], dict[int, "month_cost.HostMonth"]]


def _measured(hosts: list[Host], start: dt.datetime, end: dt.datetime, seen: Seen | None = None
              ) -> tuple[dict[int, metrics.Totals], dict[int, HostCost]]:
    """Per host: the KPI engine's totals of its GPUs and the cost model's row. Windows of whole
    hours read both from month_cost's per-span sums (a constant number of queries); a window
    cutting an hour (a :30 zone's month) measures host by host from minute rollups."""
    if month_cost.fast_path(start, end):
        months = month_cost.host_months(hosts, start, end, now=end)
        if seen is not None:
            seen[(start, end)] = months
        return ({h: _totals_of(m) for h, m in months.items()},
                {h: m.cost for h, m in months.items()})
    factors = cached_factors()
    usage = gpu_usage(hosts, start, end)
    costs = {c.host.id: c for c in host_costs(hosts, usage, start, end, now=end)}
    by_id = {h.id: h for h in hosts}
    gpus_of: dict[int, list[Gpu]] = {h.id: [] for h in hosts}
    for g in Gpu.objects.filter(host__in=hosts).order_by("id"):
        g.host = by_id[g.host_id]
        gpus_of[g.host_id].append(g)
    return {h.id: measure_gpus(gpus_of[h.id], start, end, factors) for h in hosts}, costs


def _totals_of(m: month_cost.HostMonth) -> metrics.Totals:
    """measure_gpus' totals, from a host's per-span sums."""
    return metrics.Totals(
        util_sum=m.util_sum, util_n=m.util_n, gpu_minutes=m.gpu_minutes,
        gpu_energy_j=m.gpu_energy_j, cpu_ram_energy_j=m.cpu_ram_energy_j,
        cpu_ram_method=m.cpu_ram_method, facility_energy_j=m.facility_energy_j,
        co2e_g=m.co2e_g, cost_usd=m.cost.cost_usd, cost_source=m.cost_source,
        pue_source=m.pue_source, intensity_source=m.intensity_source, simulated=m.simulated)


def _host_rows(team: Team, hosts: list[Host], start: dt.datetime, end: dt.datetime,
               seen: Seen | None = None) -> list[dict]:
    """Per host: energy and location-based carbon from the KPI engine's measure_gpus, cost and
    idle GPU-hours from the cost model, and the Scope 2/3 label."""
    measured, costs = _measured(hosts, start, end, seen)
    # Every host's site in one query, not one per host (125 hosts at 1,000 GPUs).
    sites = {hs.host_id: hs.site for hs in
             HostSite.objects.filter(host__in=hosts).select_related("site").order_by("pk")}
    out = []
    for host in hosts:
        t = measured[host.id]
        k = metrics.derive(t, (end - start).total_seconds())
        cost = costs[host.id]
        site = sites.get(host.id)
        market = _market_factor(site)
        if not k["energy_kwh"] and not cost.running_hours and not cost.billed_hours:
            continue  # a host that neither ran nor was paid for this month
        row = {
            "host": host.name, "provider": host.provider, "region": host.region,
            "instance_type": host.instance_type, "purchase_option": host.purchase_option,
            "scope": _scope(host), "site": site.name if site else "",
            "gpu_energy_kwh": k["gpu_energy_kwh"], "cpu_ram_energy_kwh": k["cpu_ram_energy_kwh"],
            "energy_kwh": k["energy_kwh"], "facility_energy_kwh": k["facility_energy_kwh"],
            "co2e_kg": k["co2e_kg"],
            "co2e_market_kg": (k["facility_energy_kwh"] * market[0] / 1000) if market else None,
            "market_factor_source": (f"{market[1]} ({market[2]})" if market and market[2]
                                     else (market[1] if market else "")),
            "pue": k["pue"], "pue_source": k["pue_source"],
            "intensity_g_per_kwh": k["intensity_g_per_kwh"],
            "intensity_source": k["intensity_source"],
            "gpu_hours": k["gpu_hours"],  # GPU-minutes reported / 60, as the KPI engine counts
            "gpu_util_pct": k["gpu_util_pct"],
            "running_hours": cost.running_hours, "billed_hours": cost.billed_hours,
            "cost_usd": cost.cost_usd,
            "price_source": cost.price.source if cost.price else "",
            "price_as_of": cost.price.as_of.date().isoformat()
            if cost.price and cost.price.as_of else "",
            "price_problem": cost.problem.message if cost.problem else "",
            "idle_gpu_hours": cost.idle_gpu_hours,
            "idle_cost_usd": cost.idle_cost_usd,
            "embodied_co2e_g_per_gpu_hour": _embodied_g_per_gpu_hour(site),
            "measurement": _measurement(t),
        }
        out.append(row)
    out.sort(key=lambda r: (-(r["cost_usd"] or 0.0), -r["energy_kwh"], r["host"]))
    return out


def _measurement(t: metrics.Totals) -> str:
    gpu = "accelerators: hardware energy counter, else integrated power (measured)"
    if t.simulated:
        gpu = "accelerators: simulated"
    cpu = f"CPU/RAM: codecarbon ({t.cpu_ram_method})" if t.cpu_ram_method else \
        "CPU/RAM: not measured"
    return f"{gpu}; {cpu}"


def _sum(rows: list[dict], key: str) -> float | None:
    """Sum of a column; unknown (None) when any row is unknown: never a partial sum."""
    values = [r[key] for r in rows]
    if any(v is None for v in values):
        return None
    return float(sum(values))


def _totals(team: Team, hosts: list[dict], start: dt.datetime, end: dt.datetime) -> dict:
    k = _kpis(team, None, start, end)
    market = [h for h in hosts if h["co2e_market_kg"] is not None]
    unpriced = [h for h in hosts if h["cost_usd"] is None]
    unknown = {}
    if unpriced:
        s = "" if len(unpriced) == 1 else "s"
        unknown["cost_usd"] = unknown["idle_cost_usd"] = (
            f"{len(unpriced)} host{s} unpriced: " + ", ".join(h["host"] for h in unpriced))
    if len(market) != len([h for h in hosts if h["energy_kwh"]]) or not market:
        unknown["co2e_market_kg"] = ("no supplier-specific factor (contract) recorded for every "
                                     "site, and no residual mix is shipped")
    return {
        "gpu_energy_kwh": k["gpu_energy_kwh"], "cpu_ram_energy_kwh": k["cpu_ram_energy_kwh"],
        "energy_kwh": k["energy_kwh"], "facility_energy_kwh": k["facility_energy_kwh"],
        "co2e_kg": k["co2e_kg"],
        # Market-based only when every host with energy has a supplier-specific factor.
        "co2e_market_kg": _sum(market, "co2e_market_kg") if market and len(market) == len(
            [h for h in hosts if h["energy_kwh"]]) else None,
        "cost_usd": _sum(hosts, "cost_usd") if hosts else 0.0,
        "requests": k["requests"], "gpu_hours": k["gpu_hours"],
        "gpu_util_pct": k["gpu_util_pct"],
        "idle_gpu_hours": float(sum(h["idle_gpu_hours"] for h in hosts)),
        "idle_cost_usd": _sum(hosts, "idle_cost_usd") if hosts else 0.0,
        "simulated": k["simulated"],
        "pue_source": k["pue_source"], "intensity_source": k["intensity_source"],
        "cpu_ram_method": k["cpu_ram_method"],
        # The partial-sum rule: a sum with unknown parts is null with the reason, and its known
        # part is given beside it as a lower bound ("≥ $X, 2 hosts unpriced").
        "cost_known_usd": float(sum(h["cost_usd"] for h in hosts
                                    if h["cost_usd"] is not None)),
        "unpriced_hosts": len(unpriced),
        "unknown": unknown,
    }


# Host and workload columns that add up to the totals, with the "not attributed" rows.
ATTRIBUTED = ("gpu_energy_kwh", "cpu_ram_energy_kwh", "energy_kwh", "facility_energy_kwh",
              "co2e_kg", "cost_usd", "gpu_hours")
WORKLOAD_ATTRIBUTED = ("energy_kwh", "facility_energy_kwh", "co2e_kg", "cost_usd")


def _not_attributed(totals: dict, rows: list[dict], keys: tuple[str, ...]) -> dict:
    """The total less its rows, per column: what no row claims (hosts no longer in the team,
    GPUs in no workload), so rows + this = the total. Negative for workloads that share GPUs
    (each counts them). Unknown where the total or a row is unknown."""
    out = {}
    for key in keys:
        values = [r.get(key) for r in rows]
        if totals.get(key) is None or any(v is None for v in values):
            out[key] = None
        else:
            out[key] = totals[key] - float(sum(values))
    return out


def _daily(team: Team, start: dt.datetime, end: dt.datetime, zone_name: str) -> list[dict]:
    """Facility energy and carbon per day of the month in the team's zone, from the same hour
    rollups as the totals (UTC day rollups would split a UTC+1 team's days wrongly)."""
    zone = ZoneInfo(zone_name)
    by_day: dict[dt.date, list] = {}
    day = start.astimezone(zone).date()
    while dt.datetime(day.year, day.month, day.day, tzinfo=zone) < end:
        by_day[day] = []
        day += dt.timedelta(days=1)
    for r in kpi_queries.rows(team, None, Period.HOUR, start, end):
        by_day.setdefault(r.bucket.astimezone(zone).date(), []).append(r)
    out = []
    for day, items in sorted(by_day.items()):
        t = metrics.merge(items)
        out.append({"day": day.isoformat(), "facility_energy_kwh": t.facility_energy_j / J_PER_KWH,
                    "co2e_kg": t.co2e_g / 1000})
    return out


def _cost_by_option(hosts: list[dict]) -> list[dict]:
    out = []
    for option, label in PurchaseOption.choices:
        rows = [h for h in hosts if h["purchase_option"] == option]
        out.append({"option": option, "label": str(label), "hosts": len(rows),
                    "cost_usd": _sum(rows, "cost_usd") if rows else 0.0})
    return out


def _workloads(team: Team, start: dt.datetime, end: dt.datetime) -> list[dict]:
    out = []
    for w in team.workloads.all().order_by("name"):
        k = _kpis(team, w, start, end)
        if not (k["requests"] or k["energy_kwh"] or k["gpu_hours"]):
            continue
        k = kpi_queries.workload_figures(w, k)
        m_g, m_how = _embodied(w, start, end)
        out.append({
            "workload": w.slug, "name": w.name, "kind": w.kind,
            "requests": k["requests"], "energy_kwh": k["energy_kwh"],
            "facility_energy_kwh": k["facility_energy_kwh"], "co2e_kg": k["co2e_kg"],
            "cost_usd": k["cost_usd"], "gpu_hours": k["gpu_hours"],
            "energy_per_inference_j": k["energy_per_inference_j"],
            "co2e_per_inference_g": None if k["co2e_per_1k_inferences_g"] is None
            else k["co2e_per_1k_inferences_g"] / 1000,
            "cost_per_1k_inferences_usd": k["cost_per_1k_inferences_usd"],
            "latency_p50_ms": k["latency_p50_ms"], "latency_p99_ms": k["latency_p99_ms"],
            "throughput_per_s": k["throughput_per_s"], "gpu_util_pct": k["gpu_util_pct"],
            # Throughput divides by the seconds the inference windows measured.
            "coverage": k.get("coverage", ""),
            "simulated": k["simulated"],
            "unknown": k["unknown"],  # figure -> why it is null
            "m_g": m_g, "m_method": m_how,
        })
    return out


def _embodied(workload, start: dt.datetime, end: dt.datetime) -> tuple[float | None, str]:
    """SCI's M for the workload, as the Green Software Foundation's SCI specification defines
    it: TE x (TiR / EL) x (RR / ToR), per GPU of the workload's own: TE / (EL x ToR) is the
    embodied rate a site records per GPU-hour (the server's total embodied emissions over its
    expected lifespan, shared by its GPUs), TiR the hours that GPU ran in the window, RR = 1
    GPU. Not a team-average rate: a workload on one GPU of a low-carbon server gets that
    server's rate. None (with the reason) when a site records none."""
    gpus = list(workload.gpu_queryset().select_related("host"))
    if not gpus:
        return None, "no GPUs assigned"
    hours = dict(GpuHour.objects.filter(gpu__in=gpus, bucket__gte=start, bucket__lt=end,
                                        samples__gt=0)
                 .values("gpu_id").annotate(n=models.Count("*")).values_list("gpu_id", "n"))
    sites = {}
    total = 0.0
    for g in gpus:
        if g.host_id not in sites:
            sites[g.host_id] = _host_site(g.host)
        rate = _embodied_g_per_gpu_hour(sites[g.host_id])
        if rate is None:
            return None, f"no embodied emissions recorded for the site of {g.host.name}"
        total += rate * hours.get(g.id, 0)
    return total, "sum over the workload's GPUs of site rate x hours it ran"


def _jobs(team: Team, start: dt.datetime, end: dt.datetime) -> list[dict]:
    qs = (TrainingJob.objects.filter(team=team, started_at__lt=end)
          .filter(models.Q(stopped_at__isnull=True) | models.Q(stopped_at__gte=start))
          .select_related("workload").order_by("started_at"))
    out = []
    for job in qs[:200]:
        s = summary(job)
        out.append({"id": s["id"], "name": s["name"], "workload": s["workload"],
                    "started_at": s["started_at"], "stopped_at": s["stopped_at"],
                    "running": s["running"], "time_to_train_s": s["time_to_train_s"],
                    "energy_kwh": s["energy_kwh"],
                    "facility_energy_kwh": s["facility_energy_kwh"], "co2e_kg": s["co2e_kg"],
                    "cost_usd": s["cost_usd"], "gpu_hours": s["gpu_hours"],
                    "accounted": s["accounted_at"] is not None,
                    "cost_source": s["cost_source"]})
    return out


def _recommendations(team: Team, start: dt.datetime, end: dt.datetime,
                     seen: Seen | None = None) -> dict:
    """The cost model's recommendations as they stood at month end (window = the month)."""
    days = max(1, round((end - start).total_seconds() / 86400))
    try:
        # The month's usage and the savings basis summed per GPU (month_cost.team_usage), not
        # read hour by hour: the same figures as collect()'s.
        # The host rows of a window the month's rows already read are not read again.
        seen = seen or {}
        usage = month_cost.team_usage(team, days, end, seen=seen)
        basis = usage if days == BASIS_DAYS else month_cost.team_usage(team, BASIS_DAYS, end,
                                                                       seen=seen)
        recs = team_recommendations(team, days, now=end, usage=usage, basis=basis)
    except Exception as exc:  # a recommendation failure must not sink the whole report
        return {"items": [], "note": f"recommendations could not be computed: {exc}"}
    items = [{"kind": r["kind"], "subject": r["subject"],
              "monthly_usd_saved": r["monthly_usd_saved"], "reasoning": r["reasoning"]}
             for r in recs["recommendations"]][:20]
    return {"items": items, "note": "" if items else "no recommendation open at month end"}


def _sci(workloads: list[dict], jobs: list[dict], hosts: list[dict]) -> dict:
    """Green Software Foundation SCI = (E x I + M) per R. E x I is the location-based CO2e of
    facility energy (E includes PUE); M only where every host records embodied emissions."""
    embodied = [h["embodied_co2e_g_per_gpu_hour"] for h in hosts]
    m_rate = None
    if hosts and all(v is not None for v in embodied):
        gpu_hours = sum(h["gpu_hours"] for h in hosts)
        m_rate = (sum(h["embodied_co2e_g_per_gpu_hour"] * h["gpu_hours"] for h in hosts)
                  / gpu_hours) if gpu_hours else None
    rows = []
    for w in workloads:
        if w["kind"] == WorkloadKind.TRAINING or not w["requests"]:
            continue
        m_g = w.get("m_g")  # the workload's own GPUs (_embodied), per the SCI spec
        # No GPU data: E x I is unknown, and so is SCI (never 0 g).
        ei_g = None if w["co2e_kg"] is None else w["co2e_kg"] * 1000
        rows.append({"subject": w["name"], "unit": "inference", "r": w["requests"],
                     "e_kwh": w["facility_energy_kwh"], "ei_g": ei_g, "m_g": m_g,
                     "sci_g": None if ei_g is None else (ei_g + (m_g or 0.0)) / w["requests"]})
    for j in jobs:
        if j["co2e_kg"] is None:
            continue
        m_g = m_rate * j["gpu_hours"] if m_rate is not None and j["gpu_hours"] else None
        ei_g = j["co2e_kg"] * 1000
        rows.append({"subject": j["name"], "unit": "training job", "r": 1,
                     "e_kwh": j["facility_energy_kwh"], "ei_g": ei_g, "m_g": m_g,
                     "sci_g": ei_g + (m_g or 0.0)})
    note = ("M (embodied) per workload = TE x (TiR / EL) x (RR / ToR) over its own GPUs (each "
            "site's embodied rate per GPU-hour x the hours each GPU ran); training jobs use the "
            "fleet's GPU-hour-weighted rate" if m_rate is not None
            else "M (embodied) not included: not every site records embodied emissions")
    return {"rows": rows, "m_note": note,
            "i_note": "I is location-based grid intensity; E is facility energy (IT x PUE)"}


def _alerts(team: Team, start: dt.datetime, end: dt.datetime) -> dict:
    """Per alert rule that existed in the month: how often it started firing in the month and
    its state at month end (from the alerts app's state-change history)."""
    rows = []
    for rule in Rule.objects.filter(team=team, created_at__lt=end).order_by("name"):
        events = RuleEvent.objects.filter(rule=rule, at__lt=end)
        fired = events.filter(at__gte=start, to_state=State.FIRING).exclude(
            from_state=State.FIRING).count()
        last = events.order_by("-at", "-id").first()
        state = last.to_state if last is not None else State.OK
        rows.append({"rule": rule.name, "what": rule.kpi or rule.kind, "fired": fired,
                     "state": State(state).label})
    note = "" if rows else "no alert rule existed in this month"
    return {"available": True, "rows": rows, "note": note}


def _methodology(totals: dict, hosts: list[dict]) -> dict:
    price_sources = sorted({f"{h['price_source']} (as of {h['price_as_of']})"
                            if h["price_as_of"] else h["price_source"]
                            for h in hosts if h["price_source"]})
    problems = sorted({h["price_problem"] for h in hosts if h["price_problem"]})
    return {
        "version": METHODOLOGY_VERSION,
        "energy": "IT energy = accelerators (GPUs, AI accelerators, edge modules: their "
                  "hardware energy counter, else integrated power) + CPU and RAM "
                  "(codecarbon, the host's share); facility energy = IT energy x PUE per host.",
        "carbon_location": "facility kWh x grid intensity of the host's site or region, per "
                           "host and hour (KPI rollups).",
        "carbon_market": "facility kWh x the supplier-specific factor a site records; shown "
                         "only when every host with energy has one.",
        "cost": "host-hours x the price of the host's purchase option; reserved, savings plan "
                "and on-premises hosts are paid for every hour they existed.",
        "pue_sources": totals["pue_source"], "intensity_sources": totals["intensity_source"],
        "cpu_ram_method": totals["cpu_ram_method"] or "not measured",
        "market_sources": sorted({f"{h['site']}: {h['market_factor_source']}"
                                  for h in hosts if h["co2e_market_kg"] is not None}),
        "embodied_sources": sorted({h["site"] for h in hosts
                                    if h["embodied_co2e_g_per_gpu_hour"] is not None}),
        "price_sources": price_sources, "price_problems": problems,
        "simulated": totals["simulated"],
    }


def month_figures(team: Team, month: Month, now: dt.datetime | None = None,
                  progress: Progress | None = None, zone: str | None = None) -> dict:
    """Every figure of the team's report for `month`, as a JSON-able dict. The month is a
    calendar month in `zone` (default: the team's time zone)."""
    zone = zone or team_zone_name(team)
    progress = progress or (lambda pct, stage: None)
    now = now or timezone.now()
    whole = windows.calendar_month(month.year, month.month, zone)
    # The running month covers its whole finished hours so far, as every page and the KPI API
    # count it (windows.so_far): a report of it is provisional and says "so far".
    if windows.floor_hour(now) <= whole.start:
        raise invalid("month", "has no finished hour yet: pick a month that has started")
    w = windows.so_far(whole, now)
    start, end = w.start, w.end
    prev_start, prev_end = month_window(team, month.previous(), zone)
    progress(10, "hosts: energy, carbon and cost")
    hosts = list(Host.objects.filter(team=team).prefetch_related("gpus"))
    seen: Seen = {}
    host_rows = _host_rows(team, hosts, start, end, seen)
    progress(35, "team totals and the previous month")
    totals = _totals(team, host_rows, start, end)
    previous = _totals(team, _host_rows(team, hosts, prev_start, prev_end), prev_start,
                       prev_end)
    cov_now = kpi_queries.host_hours(team, start, end)
    cov_before = kpi_queries.host_hours(team, prev_start, prev_end)
    # A change against a barely measured month is flagged, never a bare percentage.
    change_flag = kpi_queries.coverage_flag(cov_now, cov_before)
    change = {k: None if change_flag else metrics.change_pct(totals[k], previous[k])
              for k in TOTAL_KEYS}
    progress(55, "workloads and training jobs")
    workloads = _workloads(team, start, end)
    jobs = _jobs(team, start, end)
    progress(70, "recommendations and alerts")
    recs = _recommendations(team, start, end, seen)
    hours = int((end - start).total_seconds() // 3600)
    boundary = ""
    if start.minute or end.minute:  # zones offset by :30 or :45 from UTC
        boundary = (f"{zone} months start at :{start.minute:02d} UTC, but rollups are whole "
                    "UTC hours: each hour is counted in the month it starts in.")
    return {
        "schema": SCHEMA_VERSION,
        "methodology_version": METHODOLOGY_VERSION,
        "team": {"slug": team.slug, "name": team.name},
        "month": str(month), "month_label": month.label,
        "time_zone": zone,
        "start": start.isoformat(), "end": end.isoformat(),
        "window": w.as_dict(), "window_text": w.text, "so_far": w.so_far,
        "closed": not w.so_far and end <= now,
        "hours_in_month": int((whole.end - whole.start).total_seconds() // 3600),
        "hours_counted": hours,
        "hours_with_data": _hours_with_data(team, start, end),
        "totals": totals, "previous": previous, "change_pct": change,
        "coverage": cov_now, "previous_coverage": cov_before, "change_flag": change_flag,
        "cost_by_option": _cost_by_option(host_rows),
        "daily": _daily(team, start, end, zone),
        "hosts": host_rows, "workloads": workloads, "jobs": jobs,
        "not_attributed": {"hosts": _not_attributed(totals, host_rows, ATTRIBUTED),
                           "workloads": _not_attributed(totals, workloads,
                                                        WORKLOAD_ATTRIBUTED)},
        "recommendations": recs,
        "sci": _sci(workloads, jobs, host_rows),
        "alerts": _alerts(team, start, end),
        "methodology": {**_methodology(totals, host_rows), "boundary": boundary},
    }


# The figures a revision compares: a change in any of them is a restatement.
def comparable(figures: dict) -> dict:
    out = {f"totals.{k}": figures["totals"].get(k) for k in TOTAL_KEYS}
    for h in figures["hosts"]:
        for k in ("energy_kwh", "co2e_kg", "cost_usd"):
            out[f"host {h['host']}.{k}"] = h[k]
    for w in figures["workloads"]:
        for k in ("requests", "energy_kwh", "co2e_kg", "cost_usd"):
            out[f"workload {w['workload']}.{k}"] = w[k]
    return out


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
    return a == b


def difference(before: dict, after: dict) -> list[dict]:
    """What changed between two revisions' figures: [{figure, before, after, change}]."""
    old, new = comparable(before), comparable(after)
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if _same(a, b):
            continue
        delta = b - a if isinstance(a, int | float) and isinstance(b, int | float) else None
        out.append({"figure": key, "before": a, "after": b, "change": delta})
    return out
