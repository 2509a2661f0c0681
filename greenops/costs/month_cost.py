"""Each host's cost, idle time, energy and carbon over a long window of whole hours, summed in
the database per host and span instead of read per GPU-hour (issue 35 item 4: a month of
1,000 GPUs is 744,000 GPU-hours, and 93,000 host-hours).

The figures are those of `accounting.host_costs` (through `cost_of`), `gpu_usage`'s idle
minutes and the KPI engine's `it_energy` + `carbon_of` per host, by the same rules: the hours a
host ran (any GPU reporting) or, for commitments and owned hardware, existed, x the price in
force in each hour; idle minutes judged minute by minute through the hour rollups' counts;
PUE and grid intensity of each hour. What changes is where the sums are taken. The window is
cut at every instant at which any host's price (its terms, its offer's price periods, its
team's overrides), its site factors or its enrollment begin or end; the hour holding such an
instant is a span of its own, so an hour split by a change of terms is split as cost_of splits
it. Inside a span nothing that weighs or prices an hour changes, so a span's figures are its
hours' sums (hours ran, hours owned, joules, idle minutes) x the one price and factor of the
span: a few rows per host, read in a constant number of queries whatever the number of hosts.

Windows that cut an hour, or another idle threshold, keep the per-hour path (`host_costs`):
their figures come from minute rollups.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field

from django.db import connection

from greenops import windows
from greenops.carbon.accounting import (
    FactorsFor,
    SiteFactors,
    carbon_over,
    ensure_factors,
    factors_at,
)
from greenops.carbon.models import FactorsPeriod
from greenops.costs import overrides
from greenops.costs.accounting import (
    HOUR,
    IDLE_UTIL_PCT,
    GpuUsage,
    HostCost,
    Prices,
    TeamUsage,
    _label,
    _parts,
    _problem,
    cached_prices,
    collect,
    gpu_usage,
)
from greenops.costs.catalog import HourlyPrice, PriceProblem, catalog_price
from greenops.costs.models import HOST_TERM_FIELDS, HostCostConfig, HostTerms
from greenops.energy import hour_aligned
from greenops.teams.models import Team
from greenops.telemetry import store
from greenops.telemetry.models import Gpu, GpuHour, GpuMinute, Host, HostEnergyHour
from greenops.units import J_PER_KWH

# Per host and span: hours it ran, the GPUs' energy and utilisation, whether any hour was
# simulated, and the minutes the hour rollups counted with a utilisation and idle.
SPANS_SQL = """
    SELECT g.host_id, width_bucket(h.bucket, %(cuts)s::timestamptz[]) AS span,
           count(DISTINCT h.bucket) FILTER (WHERE h.samples > 0),
           coalesce(sum(h.energy_j), 0), coalesce(sum(h.util_sum), 0),
           coalesce(sum(h.util_n), 0), coalesce(max(h.simulated_samples), 0),
           coalesce(sum(h.util_minutes) FILTER (WHERE h.samples > 0 AND h.util_minutes <> 0), 0),
           coalesce(sum(h.idle_minutes) FILTER (WHERE h.samples > 0 AND h.util_minutes <> 0), 0)
    FROM {hour} h JOIN {gpu} g ON g.id = h.gpu_id
    WHERE h.gpu_id = ANY(%(gpus)s) AND h.bucket >= %(start)s AND h.bucket < %(end)s
    GROUP BY 1, 2
"""
# gpu_usage's rule for minutes no hour counted: a GPU with an hour holding a utilisation but
# no minute counted, or with no hour row at all, has its minute rollups counted in the hours
# where none of its hour rows counted them.
MINUTES_SQL = """
    WITH hrs AS (
        SELECT gpu_id, bucket, util_n, util_minutes FROM {hour}
        WHERE gpu_id = ANY(%(gpus)s) AND bucket >= %(start)s AND bucket < %(end)s
          AND samples > 0
    ), fallback AS (
        -- One pass over hrs grouped by GPU: the two correlated EXISTS this replaces were
        -- re-run per GPU over the whole CTE (an OR of them is no anti-join), which is GPUs x
        -- GPU-hours: 10 s for 2,000 GPUs over 7 days, 41 s for 4,000 (bench10k).
        SELECT g.id, g.host_id FROM {gpu} g
        LEFT JOIN (SELECT gpu_id, bool_or(util_minutes = 0 AND util_n <> 0) AS uncounted
                   FROM hrs GROUP BY gpu_id) s ON s.gpu_id = g.id
        WHERE g.id = ANY(%(gpus)s) AND (s.gpu_id IS NULL OR s.uncounted)
    )
    SELECT {by},
           count(*), count(*) FILTER (WHERE m.util_sum < m.util_n * %(idle_pct)s)
    FROM {minute} m JOIN fallback f ON f.id = m.gpu_id
    WHERE m.bucket >= %(start)s AND m.bucket < %(end)s AND m.util_n > 0
      AND NOT EXISTS (SELECT 1 FROM hrs WHERE hrs.gpu_id = m.gpu_id
                      AND hrs.bucket = date_trunc('hour', m.bucket, 'UTC')
                      AND hrs.util_minutes <> 0)
    GROUP BY {by}
"""
# Per GPU over the window: gpu_usage's figures summed (its hours with a sample, their energy,
# peak memory and first hour, and the minutes they counted), and the minutes no hour counted.
GPU_SUMS_SQL = """
    SELECT gpu_id, count(*), sum(energy_j), max(mem_used_max_mib), min(bucket),
           coalesce(sum(util_minutes) FILTER (WHERE util_minutes <> 0), 0),
           coalesce(sum(idle_minutes) FILTER (WHERE util_minutes <> 0), 0)
    FROM {hour}
    WHERE gpu_id = ANY(%(gpus)s) AND bucket >= %(start)s AND bucket < %(end)s AND samples > 0
    GROUP BY 1
"""
# Per hour of the window: how many of these hosts ran (TeamUsage.hourly_counts).
HOURLY_COUNTS_SQL = """
    SELECT h.bucket, count(DISTINCT g.host_id) FROM {hour} h JOIN {gpu} g ON g.id = h.gpu_id
    WHERE h.gpu_id = ANY(%(gpus)s) AND h.bucket >= %(start)s AND h.bucket < %(end)s
      AND h.samples > 0
    GROUP BY 1
"""
# Host CPU and RAM energy per span and method pair.
CPU_RAM_SQL = """
    SELECT host_id, width_bucket(bucket, %(cuts)s::timestamptz[]), cpu_method, ram_method,
           sum(coalesce(cpu_energy_j, 0) + coalesce(ram_energy_j, 0)),
           coalesce(max(simulated_samples), 0)
    FROM {host_energy}
    WHERE host_id = ANY(%(hosts)s) AND bucket >= %(start)s AND bucket < %(end)s
    GROUP BY 1, 2, 3, 4
"""
# Minute buckets reported per host: the KPI engine's GPU-hours (energy.gpu_minutes_by_host).
GPU_MINUTES_SQL = """
    SELECT g.host_id, count(*) FROM {minute} m JOIN {gpu} g ON g.id = m.gpu_id
    WHERE m.gpu_id = ANY(%(gpus)s) AND m.bucket >= %(start)s AND m.bucket < %(end)s
    GROUP BY 1
"""
TABLES = {"hour": GpuHour._meta.db_table, "minute": GpuMinute._meta.db_table,
          "gpu": Gpu._meta.db_table, "host_energy": HostEnergyHour._meta.db_table}


@dataclass
class Span:
    """One host over [start, end) of whole hours with one price and one set of factors."""

    start: dt.datetime
    end: dt.datetime
    ran_hours: int = 0
    gpu_energy_j: float = 0.0
    cpu_ram_energy_j: float = 0.0
    util_minutes: int = 0
    idle_minutes: int = 0

    @property
    def it_energy_j(self) -> float:
        return self.gpu_energy_j + self.cpu_ram_energy_j


@dataclass
class HostMonth:
    """One host over the window: its cost row (as host_costs builds it) and the energy and
    carbon the KPI engine's measure_gpus gives for its GPUs."""

    cost: HostCost
    gpu_energy_j: float = 0.0
    cpu_ram_energy_j: float = 0.0
    util_sum: float = 0.0
    util_n: int = 0
    gpu_minutes: int = 0
    simulated: bool = False
    cpu_ram_method: str = ""
    facility_energy_j: float = 0.0
    co2e_g: float = 0.0
    pue_source: str = ""
    intensity_source: str = ""
    cost_source: str = ""
    spans: list[Span] = field(default_factory=list)


def fast_path(start: dt.datetime, end: dt.datetime,
              idle_threshold_pct: float = IDLE_UTIL_PCT) -> bool:
    """Whether `host_months` answers for this window (else host_costs, per hour). Its SQL is
    PostgreSQL's (arrays, width_bucket, date_trunc): the embedded default's SQLite, a small
    fleet by design, keeps the per-hour path, whose figures these equal."""
    return (connection.vendor == "postgresql" and hour_aligned(start, end)
            and idle_threshold_pct == store.IDLE_UTIL_PCT)


def site_factors_of(hosts: list[Host]) -> tuple[FactorsFor, dict[int, list[FactorsPeriod]]]:
    """The carbon app's factors in force per host and hour (cached_site_factors), every
    host's periods read in one query (a host's first lookup records them)."""
    periods: dict[int, list[FactorsPeriod]] = defaultdict(list)
    for p in FactorsPeriod.objects.filter(host__in=hosts).order_by("host_id", "valid_from"):
        periods[p.host_id].append(p)
    for host in hosts:
        if not periods.get(host.id):
            periods[host.id] = ensure_factors(host)

    def lookup(host: Host, hour: dt.datetime) -> SiteFactors:
        if not periods.get(host.id):
            periods[host.id] = ensure_factors(host)
        return factors_at(periods[host.id], hour)

    return lookup, periods


def latest_prices(hosts: list[Host], now: dt.datetime | None
                  ) -> dict[int, HourlyPrice | PriceProblem]:
    """catalog.host_price of every host (today's catalog price under its stored settings,
    after the team's overrides in force at `now`), each offer looked up once."""
    configs = {c.host_id: c for c in HostCostConfig.objects.filter(host__in=hosts)}
    rows = {t: overrides.team_overrides(t) for t in {h.team_id for h in hosts}}
    seen: dict[HostTerms, HourlyPrice] = {}
    out: dict[int, HourlyPrice | PriceProblem] = {}
    for host in hosts:
        config = configs.get(host.id)
        terms = HostTerms.of({f: getattr(host, f) for f in HOST_TERM_FIELDS}, config)
        found = seen.get(terms) or catalog_price(host, now, config)
        if isinstance(found, HourlyPrice):
            seen[terms] = found
        out[host.id] = overrides.apply(host, now, found, rows[host.team_id])
    return out


def _cuts(hosts: list[Host], start: dt.datetime, end: dt.datetime, price: Prices,
          factor_periods: dict[int, list[FactorsPeriod]]) -> list[dt.datetime]:
    """[start, then every hour start inside the window at which a span begins]: around each
    instant at which something changes, its hour stands alone."""
    instants: set[dt.datetime] = set()
    for host in hosts:
        instants |= price.changes_of_price(host)
        instants.update(p.valid_from for p in factor_periods.get(host.id, ()))
        instants.update(t for t in (host.created_at, host.removed_at) if t is not None)
    cuts = {start}
    for t in instants:
        for c in (windows.floor_hour(t), windows.floor_hour(t) + HOUR):
            if start < c < end:
                cuts.add(c)
    return sorted(cuts)


def _owned(host: Host, start: dt.datetime, end: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """[first, last) hour buckets in which the host existed (accounting.existing_hours)."""
    first = windows.floor_hour(start)
    if host.created_at is not None and host.created_at > start:
        first = max(first, windows.floor_hour(host.created_at))
    last = min(end, host.removed_at) if host.removed_at is not None else end
    # Buckets b < last: up to the hour holding `last` when it falls inside one.
    after = windows.floor_hour(last) + (HOUR if last > windows.floor_hour(last) else 0 * HOUR)
    return first, max(first, after)


BY_HOST_SPAN = ("f.host_id, width_bucket(date_trunc('hour', m.bucket, 'UTC'), "
                "%(cuts)s::timestamptz[])")


def _query(sql: str, params: dict, by: str = "") -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql.format(**TABLES, by=by), params)
        return cursor.fetchall()


def host_months(hosts: list[Host], start: dt.datetime, end: dt.datetime,
                now: dt.datetime | None = None, price: Prices | None = None,
                factors: tuple[FactorsFor, dict[int, list[FactorsPeriod]]] | None = None,
                gpu_minutes: bool = True) -> dict[int, HostMonth]:
    """Per host (its GPUs prefetched: prefetch_related("gpus")): its host_costs row and the
    energy and carbon measure_gpus gives its GPUs over [start, end) of whole hours, in a
    constant number of queries. `gpu_minutes`: count the KPI engine's GPU-minutes too (a
    report's GPU-hours): a count over every minute rollup of the window, which a cost figure
    never reads (left 0 without it)."""
    price = price or cached_prices(now)
    price.load(hosts)
    factors_for, factor_periods = factors or site_factors_of(hosts)
    cuts = _cuts(hosts, start, end, price, factor_periods)
    bounds = [*cuts, end]
    gpus_of = {h.id: list(h.gpus.all()) for h in hosts}
    gpu_ids = [g.id for gs in gpus_of.values() for g in gs]
    params = {"cuts": cuts, "gpus": gpu_ids, "start": start, "end": end,
              "hosts": [h.id for h in hosts if gpus_of[h.id]],
              "idle_pct": store.IDLE_UTIL_PCT}
    out: dict[int, HostMonth] = {}
    latest = latest_prices(hosts, now)
    for host in hosts:
        out[host.id] = HostMonth(HostCost(host, None, None, 0, 0, 0.0, len(gpus_of[host.id])))
        # Every span, data or not: a commitment is billed for the hours it existed.
        if gpus_of[host.id]:
            out[host.id].spans = [Span(a, b) for a, b in zip(bounds, bounds[1:], strict=False)]

    def span(host_id: int, i: int) -> Span:
        return out[host_id].spans[i - 1]  # width_bucket counts from 1

    for host_id, i, ran, energy_j, util_sum, util_n, sim, n, idle in _query(SPANS_SQL, params):
        s = span(host_id, i)
        s.ran_hours, s.gpu_energy_j = ran, energy_j
        s.util_minutes, s.idle_minutes = n, idle
        m = out[host_id]
        m.util_sum += util_sum
        m.util_n += util_n
        m.simulated = m.simulated or bool(sim)
    for host_id, i, n, idle in _query(MINUTES_SQL, params, by=BY_HOST_SPAN):
        s = span(host_id, i)
        s.util_minutes += n
        s.idle_minutes += idle
    methods: dict[int, set[str]] = defaultdict(set)
    for host_id, i, cpu_m, ram_m, joules, sim in _query(CPU_RAM_SQL, params):
        # The host's GPUs are all of the set: its share of the host's CPU and RAM is 1.
        span(host_id, i).cpu_ram_energy_j += joules
        out[host_id].simulated = out[host_id].simulated or bool(sim)
        methods[host_id].add(f"CPU {cpu_m}, RAM {ram_m}")
    for host_id, n in _query(GPU_MINUTES_SQL, params) if gpu_minutes else ():
        out[host_id].gpu_minutes = n
    for host in hosts:
        m = out[host.id]
        m.cpu_ram_method = "; ".join(sorted(methods[host.id]))
        m.gpu_energy_j = sum(s.gpu_energy_j for s in m.spans)
        m.cpu_ram_energy_j = sum(s.cpu_ram_energy_j for s in m.spans)
        _carbon(m, host, factors_for)
        _cost(m, host, start, end, price, factors_for, latest[host.id])
    return out


def _carbon(m: HostMonth, host: Host, factors_for: FactorsFor) -> None:
    """carbon_of over the host's spans: PUE and intensity of each span on its IT energy."""
    carbon = carbon_over((s.it_energy_j, factors_for(host, s.start)) for s in m.spans
                         if s.it_energy_j)
    m.facility_energy_j += carbon.facility_energy_j
    m.co2e_g += carbon.co2e_g
    m.pue_source, m.intensity_source = carbon.pue_source, carbon.intensity_source


def _cost(m: HostMonth, host: Host, start: dt.datetime, end: dt.datetime, price: Prices,
          factors_for: FactorsFor, latest: HourlyPrice | PriceProblem) -> None:
    """cost_of and host_costs for one host over its spans (see the module docstring)."""
    hc = m.cost
    owned_lo, owned_hi = _owned(host, start, end)
    problem: PriceProblem | None = None
    sources: list[str] = []
    running = billed = hardware = electricity = 0.0
    has_gpus = bool(hc.gpu_count)
    idle_total, idle_usd, idle_priced = 0, 0.0, True
    for s in m.spans:
        hours = (s.end - s.start) / HOUR
        # Spans never straddle the enrollment or removal hour: wholly owned or not at all.
        owned = hours if owned_lo <= s.start and s.end <= owned_hi else 0.0
        # Hours it ran outside its enrollment are billed as ran; owned hours it did not run
        # are billed only under a commitment.
        ran_owned = min(s.ran_hours, owned)
        running += s.ran_hours
        energy_j = s.it_energy_j
        for a, b in _parts(price, host, s.start, s.end):
            weight = (b - a) / (s.end - s.start)
            billed_n = s.ran_hours + ((owned - ran_owned) if price.committed(host, a) else 0)
            if not billed_n and not energy_j:
                continue
            found = price(host, s.start, a)
            if not isinstance(found, HourlyPrice):
                problem = problem or _problem(found, host)
                continue
            sources.append(_label(found))
            if billed_n:
                part = billed_n * weight
                billed += part
                hardware += part * found.usd_per_hour
            if found.electricity_usd_per_kwh is not None and energy_j:
                pue = factors_for(host, s.start).pue
                electricity += (energy_j * weight / J_PER_KWH * pue
                                * found.electricity_usd_per_kwh)
        idle_total += s.idle_minutes
        if s.idle_minutes:
            found = price(host, s.start)
            if isinstance(found, HourlyPrice):
                idle_usd += s.idle_minutes / 60 * found.usd_per_hour / hc.gpu_count
            else:
                idle_priced = False
    hc.price = latest if isinstance(latest, HourlyPrice) else None
    hc.problem = problem or (latest if isinstance(latest, PriceProblem) else None)
    hc.running_hours, hc.billed_hours = int(round(running)), int(round(billed))
    hc.energy_kwh = (m.gpu_energy_j + m.cpu_ram_energy_j) / J_PER_KWH
    if hc.problem is None:
        hc.cost_usd = hardware + electricity if has_gpus else 0.0
        hc.electricity_usd = electricity
    hc.idle_gpu_hours = idle_total / 60
    if hc.usd_per_gpu_hour is not None and hc.problem is None:
        hc.idle_cost_usd = idle_usd if idle_priced else None
    m.cost_source = "; ".join(dict.fromkeys(sources))


class RecentUsage:
    """gpu_usage of a window's latest hours, read on first use: only the recommendations'
    idle-streak check reads GPUs hour by hour, so a cost card or the Costs page's totals never
    pay for it (48,000 GPU-hours at 1,000 GPUs, for each window the team home shows)."""

    def __init__(self, hosts: list[Host], start: dt.datetime, end: dt.datetime) -> None:
        self.hosts, self.start, self.end = hosts, start, end
        self._usage: dict[int, GpuUsage] | None = None

    def of(self, gpu_id: int, host_id: int) -> GpuUsage:
        if self._usage is None:
            self._usage = gpu_usage(self.hosts, self.start, self.end)
        return self._usage.get(gpu_id) or GpuUsage(gpu_id, host_id)


@dataclass(eq=False)
class GpuSummary:
    """gpu_usage's GpuUsage of one GPU over a long window, as sums: what the recommendations
    read of it (GpuUsage's hour_count, first_hour, mem_max_mib, energy_kwh, idle_share,
    idle_minutes), and its hour-by-hour usage of the window's latest hours only (`latest`),
    which the idle-streak check judges hour by hour."""

    gpu_id: int
    host_id: int
    hours_reported: int = 0
    energy_j: float = 0.0
    mem_max: float | None = None
    first: dt.datetime | None = None
    minutes_n: int = 0
    idle_n: int = 0
    recent: RecentUsage | None = None

    def hour_count(self) -> int:
        return self.hours_reported

    def first_hour(self) -> dt.datetime | None:
        return self.first

    def mem_max_mib(self) -> float | None:
        return self.mem_max

    @property
    def energy_kwh(self) -> float:
        return self.energy_j / J_PER_KWH

    def idle_minutes(self) -> int:
        return self.idle_n

    def idle_hours(self, threshold_pct: float = IDLE_UTIL_PCT) -> float:
        return self.idle_n / 60

    def idle_share(self, buckets: list[dt.datetime] | None = None) -> float | None:
        if buckets is not None:
            return self.latest().idle_share(buckets)
        return self.idle_n / self.minutes_n if self.minutes_n else None

    def latest(self) -> GpuUsage:
        if self.recent is None:
            return GpuUsage(self.gpu_id, self.host_id)
        return self.recent.of(self.gpu_id, self.host_id)


@dataclass
class TeamSummary(TeamUsage):
    """collect()'s TeamUsage with month_cost's host rows and GpuSummary usage, the usage read
    on first use: a cost card reads the rows only (the GPUs' sums are a second scan of the
    window's hour rollups, a second per window of the team home at 1,000 GPUs); the
    recommendations, a workload's GPU-hours and the unpriced hosts' GPU-hours read it."""

    latest_hours: int = 48

    @property  # type: ignore[override]
    def usage(self) -> dict[int, GpuSummary]:  # type: ignore[override]
        if self._usage is None:
            self._usage = gpu_summaries(self.hosts, self.start, self.end, self.latest_hours)
        return self._usage

    @usage.setter
    def usage(self, value: dict[int, GpuSummary] | None) -> None:
        self._usage = value  # None: read on first use

    def hourly_counts(self, hosts: list[Host]) -> list[int]:
        gpus = [g.id for h in hosts for g in h.gpus.all()]
        counts = dict(_query(HOURLY_COUNTS_SQL, {"gpus": gpus, "start": self.start,
                                                 "end": self.end}))
        return [counts.get(self.start + i * HOUR, 0) for i in range(self.window_hours)]


def gpu_summaries(hosts: list[Host], start: dt.datetime, end: dt.datetime,
                  latest_hours: int) -> dict[int, GpuSummary]:
    """gpu_usage over [start, end) as GpuSummary per GPU, with the hour-by-hour usage of the
    last `latest_hours` hours."""
    gpu_host = {g.id: h.id for h in hosts for g in h.gpus.all()}
    params = {"gpus": list(gpu_host), "start": start, "end": end,
              "idle_pct": store.IDLE_UTIL_PCT}
    out: dict[int, GpuSummary] = {}
    for gpu_id, n, energy_j, mem, first, util_minutes, idle in _query(GPU_SUMS_SQL, params):
        out[gpu_id] = GpuSummary(gpu_id, gpu_host[gpu_id], n, energy_j or 0.0, mem, first,
                                 util_minutes, idle)
    for gpu_id, n, idle in _query(MINUTES_SQL, params, by="m.gpu_id"):
        s = out.setdefault(gpu_id, GpuSummary(gpu_id, gpu_host[gpu_id]))
        s.minutes_n += n
        s.idle_n += idle
    # A GPU that reported in the latest hours reported in the window: it has a summary.
    recent = RecentUsage(hosts, max(start, end - latest_hours * HOUR), end)
    for s in out.values():
        s.recent = recent
    return out


def team_usage(team: Team, lookback_days: float, now: dt.datetime | None = None,
               idle_threshold_pct: float = IDLE_UTIL_PCT, latest_hours: int = 48,
               seen: dict[tuple[dt.datetime, dt.datetime], dict[int, HostMonth]] | None = None
               ) -> TeamUsage:
    """collect(team, lookback_days, now, idle_threshold_pct), the one door of every surface
    that shows a team's cost over a lookback (the Costs page, its API, the team home's cards,
    the recommendations, a report): at the standard idle threshold summed -- host rows from
    host_months and per-GPU sums, in a constant number of queries -- and collect()'s per-hour
    path only for another threshold. `seen`: host_months of windows the caller already read
    with the same `now` (a report's month), by window."""
    w = windows.lookback(lookback_days, now)  # type: ignore[arg-type]
    if not fast_path(w.start, w.end, idle_threshold_pct):
        return collect(team, lookback_days, now, idle_threshold_pct)  # type: ignore[arg-type]
    hosts = list(team.hosts.prefetch_related("gpus"))
    months = (seen or {}).get((w.start, w.end))
    if months is None or set(months) != {h.id for h in hosts}:
        months = host_months(hosts, w.start, w.end, now=now, gpu_minutes=False)
    return TeamSummary(team, lookback_days, w.start, w.end, hosts, None,  # type: ignore[arg-type]
                       [months[h.id].cost for h in hosts], latest_hours)
