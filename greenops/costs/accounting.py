"""The one cost model of every page, report and alert, and the Costs page's per-host figures.

Cost of a set of GPUs over [start, end) (`cost_of`), per host and hour:
  - an hour is billed when the host ran in it (any of its GPUs reported) or, for commitments
    (reserved, savings plan) and owned on-premises hardware, when the host existed in it (from
    its enrollment to its removal) whether it ran or not;
  - each billed hour costs the host's price in force in that hour x the part of the hour inside
    the window x the set's share of the host (its GPUs there / all the host's GPUs);
  - "in force" twice over: the host's terms (purchase option, offer, commitment term, on-prem
    hardware and $/kWh: costs.models.HostTermsPeriod) of that moment, an hour in which they
    changed split at the change, and the catalog price of that offer at the hour's start
    (costs.models.PricePeriod) -- so an edit or a refresh never reprices a past month;
  - on premises add electricity: the set's IT energy (GPU + CPU/RAM share) x the host's PUE
    from the carbon app's site factors x $/kWh.
The KPI rollups, training jobs, the Costs page, alerts and reports all call `cost_of`, so the
same host and window cost the same everywhere. Usage comes from rollups, never raw samples.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from django.db import models
from django.db.models import Count, F, Q
from django.db.models.functions import TruncHour

from greenops import windows
from greenops.carbon.accounting import FactorsFor, cached_site_factors
from greenops.costs import overrides
from greenops.costs.catalog import HourlyPrice, PriceProblem, catalog_price, host_price
from greenops.costs.models import HostTerms, HostTermsPeriod, Price, PricePeriod, terms_at
from greenops.energy import ItEnergy, hour_aligned, it_energy, overlap
from greenops.teams.models import Team
from greenops.telemetry import store
from greenops.telemetry.models import GpuHour, GpuMinute, Host, PurchaseOption
from greenops.units import J_PER_KWH

# Below this a GPU-minute is idle: nothing serious runs at <5% SM activity (the hour rollups
# count idle minutes at this threshold: greenops.telemetry.store.IDLE_UTIL_PCT).
IDLE_UTIL_PCT = 5.0
COMMITTED = (PurchaseOption.RESERVED, PurchaseOption.SAVINGS_PLAN, PurchaseOption.ON_PREM)
HOUR = dt.timedelta(hours=1)

# The price of a host in a given hour: what it cost then, or why there is none.
PriceFor = Callable[[Host, dt.datetime], HourlyPrice | PriceProblem | None]


class Prices:
    """The `PriceFor` of every page (see cached_prices): per host and hour, the catalog price
    (or on-premises cost) under the host's terms in force then (HostTermsPeriod), then the
    team's overrides in force then. Each host's terms, offer and periods are read once."""

    def __init__(self, now: dt.datetime | None = None) -> None:
        self.now = now
        self._terms: dict[int, list[HostTermsPeriod]] = {}
        # (host id, terms period id) -> (host as of those terms, catalog answer, price periods)
        self._found: dict[tuple[int, int | None], tuple[Host, HourlyPrice | PriceProblem,
                                                        list[PricePeriod]]] = {}
        self._team_rows: dict[int, list[overrides.PriceOverride]] = {}
        self._catalog: dict[HostTerms, tuple[HourlyPrice, list[PricePeriod]]] = {}
        self._offers: dict[int, list[PricePeriod]] = {}

    def terms(self, host: Host) -> list[HostTermsPeriod]:
        if host.id not in self._terms:
            self._terms[host.id] = HostTermsPeriod.ensure(host)
        return self._terms[host.id]

    def load(self, hosts: list[Host]) -> None:
        """Read these hosts' terms in one query (a host's first pricing records them) and
        their teams' overrides once: pricing many hosts then costs queries per offer, not per
        host (a report prices 125 hosts at 1,000 GPUs)."""
        missing = [h for h in hosts if h.id not in self._terms]
        found: dict[int, list[HostTermsPeriod]] = defaultdict(list)
        for p in HostTermsPeriod.objects.filter(host_id__in=[h.id for h in missing]) \
                .order_by("host_id", "valid_from"):
            found[p.host_id].append(p)
        for host in missing:
            self._terms[host.id] = found.get(host.id) or HostTermsPeriod.ensure(host)
        for team_id in {h.team_id for h in hosts} - set(self._team_rows):
            self._team_rows[team_id] = overrides.team_overrides(team_id)

    def _of(self, host: Host, at: dt.datetime
            ) -> tuple[Host, HourlyPrice | PriceProblem, list[PricePeriod]]:
        return self._of_period(host, terms_at(self.terms(host), at))

    def _of_period(self, host: Host, period: HostTermsPeriod
                   ) -> tuple[Host, HourlyPrice | PriceProblem, list[PricePeriod]]:
        key = (host.id, period.id)
        if key not in self._found:
            as_of, config = period.terms.host_and_config(host)
            # Hosts under the same terms share the catalog's answer and the offer's periods
            # (a problem names its host, so it is looked up per host).
            shared = self._catalog.get(period.terms)
            if shared is None:
                found = catalog_price(as_of, self.now, config)
                offer = self._periods(found.price) if isinstance(found, HourlyPrice) \
                    and found.price is not None else []
                if isinstance(found, HourlyPrice):
                    self._catalog[period.terms] = (found, offer)
            else:
                found, offer = shared
            self._found[key] = (as_of, found, offer)
        return self._found[key]

    def _periods(self, price: Price) -> list[PricePeriod]:
        if price.pk not in self._offers:
            self._offers[price.pk] = price_periods(price)
        return self._offers[price.pk]

    def changes_of_price(self, host: Host) -> set[dt.datetime]:
        """Every instant at which the host's price may change: its terms' starts, the price
        periods of each of its offers and its team's overrides' bounds. Between two of them
        every hour of the host costs the same."""
        out: set[dt.datetime] = set()
        for period in self.terms(host):
            out.add(period.valid_from)
            for p in self._of_period(host, period)[2]:
                out.update(t for t in (p.valid_from, p.valid_to) if t is not None)
        if host.team_id not in self._team_rows:
            self._team_rows[host.team_id] = overrides.team_overrides(host.team_id)
        for row in self._team_rows[host.team_id]:
            out.update(t for t in (row.valid_from, row.valid_until) if t is not None)
        return out

    def host_at(self, host: Host, at: dt.datetime) -> Host:
        """The host as its terms were at `at` (purchase option, offer)."""
        return self._of(host, at)[0]

    def committed(self, host: Host, at: dt.datetime) -> bool:
        return is_committed(self.host_at(host, at))

    def changes(self, host: Host, lo: dt.datetime, hi: dt.datetime) -> list[dt.datetime]:
        """The instants in (lo, hi) at which the host's terms changed."""
        return [p.valid_from for p in self.terms(host) if lo < p.valid_from < hi]

    def __call__(self, host: Host, hour: dt.datetime, at: dt.datetime | None = None
                 ) -> HourlyPrice | PriceProblem:
        """The price of `hour` under the terms in force at `at` (default: the hour's start);
        catalog periods and team overrides are those in force at the hour's start."""
        as_of, found, offer = self._of(host, at or hour)
        if host.team_id not in self._team_rows:
            self._team_rows[host.team_id] = overrides.team_overrides(host.team_id)
        # The team's own prices in force in that hour (greenops.costs.overrides) come last.
        return overrides.apply(as_of, hour, in_force(found, offer, hour),
                               self._team_rows[host.team_id])


def cached_prices(now: dt.datetime | None = None) -> Prices:
    """Prices of the hour: each host's terms and offer looked up once, then the price in force
    in the asked hour from the offer's recorded periods, under the host's terms in force then
    (a refresh or an edit of the host never reprices the past)."""
    return Prices(now)


def price_periods(price: Price) -> list[PricePeriod]:
    return list(PricePeriod.objects.filter(**PricePeriod.offer_of(price))
                .exclude(valid_to=F("valid_from")).order_by("valid_from"))


def in_force(found: HourlyPrice | PriceProblem, periods: list[PricePeriod],
             hour: dt.datetime) -> HourlyPrice | PriceProblem:
    """The offer's price in force at the start of `hour`. Before its first recorded period the
    earliest recorded price applies (labelled so); with one period it is the current price."""
    if not isinstance(found, HourlyPrice) or len(periods) < 2:
        return found
    period = next((p for p in periods if p.valid_from <= hour
                   and (p.valid_to is None or hour < p.valid_to)), None)
    note = "in force"
    if period is None:
        period, note = periods[0], "earliest recorded price, in force"
    if period.valid_to is None:
        return found
    return replace(found, usd_per_hour=float(period.usd_per_hour), as_of=period.valid_from,
                   source=f"{period.source} ({note} {period.valid_from:%Y-%m-%d} to "
                          f"{period.valid_to:%Y-%m-%d})"[:300], price=None)


def is_committed(host: Host) -> bool:
    """Paid for every hour owned, run or not."""
    return host.purchase_option in COMMITTED or host.provider == "on_prem"


def existing_hours(host: Host, start: dt.datetime, end: dt.datetime) -> set[dt.datetime]:
    """The hour buckets overlapping [start, end) in which the host existed for at least part of
    the hour: a commitment or owned hardware is not ours to pay before enrollment or after
    removal. The hour it was enrolled in counts whole, as AWS bills a started hour."""
    first = windows.floor_hour(start)
    if host.created_at is not None and host.created_at > start:
        first = max(first, windows.floor_hour(host.created_at))
    last = min(end, host.removed_at) if host.removed_at is not None else end
    out = set()
    b = first
    while b < last:
        out.add(b)
        b += HOUR
    return out


def running_hours(host_ids: list[int], start: dt.datetime, end: dt.datetime
                  ) -> dict[int, set[dt.datetime]]:
    """Per host: the hour buckets overlapping [start, end) in which any of its GPUs reported
    inside the window (hour rollups for hour-aligned windows, minute rollups otherwise)."""
    if hour_aligned(start, end):
        rows = GpuHour.objects.filter(gpu__host_id__in=host_ids, bucket__gte=start,
                                      bucket__lt=end, samples__gt=0) \
            .values_list("gpu__host_id", "bucket").distinct()
    else:
        rows = GpuMinute.objects.filter(gpu__host_id__in=host_ids, bucket__gte=start,
                                        bucket__lt=end, samples__gt=0) \
            .annotate(h=TruncHour("bucket")).values_list("gpu__host_id", "h").distinct()
    out: dict[int, set[dt.datetime]] = defaultdict(set)
    for host_id, bucket in rows:
        out[host_id].add(windows.floor_hour(bucket))
    return out


@dataclass
class HostLine:
    """One host's part of a cost: what was billed, at which price, and why not if not."""

    host: Host
    share: float
    running_hours: float = 0.0  # hours it ran, weighted by the part inside the window
    billed_hours: float = 0.0  # hours billed (owned, for commitments), same weighting
    hardware_usd: float = 0.0  # billed hours x price x share
    electricity_usd: float = 0.0  # on premises only
    price: HourlyPrice | None = None  # the latest price used
    problem: PriceProblem | None = None

    @property
    def cost_usd(self) -> float | None:
        return None if self.problem is not None else self.hardware_usd + self.electricity_usd


@dataclass
class Cost:
    """What a set of GPUs cost over a window; `cost_usd` is None when any host has no price
    (a partial sum shown as the total would be a wrong figure)."""

    cost_usd: float | None = 0.0
    source: str = ""
    problems: list[str] = field(default_factory=list)
    hosts: dict[int, HostLine] = field(default_factory=dict)


def _parts(price: PriceFor, host: Host, lo: dt.datetime, hi: dt.datetime
           ) -> list[tuple[dt.datetime, dt.datetime]]:
    """[lo, hi) cut at each change of the host's terms inside it."""
    cuts = price.changes(host, lo, hi) if isinstance(price, Prices) else []
    edges = [lo, *sorted(cuts), hi]
    return list(zip(edges, edges[1:], strict=False))


def _committed(price: PriceFor, host: Host, at: dt.datetime) -> bool:
    return price.committed(host, at) if isinstance(price, Prices) else is_committed(host)


def _label(price: HourlyPrice) -> str:
    return f"{price.source} (stale)" if price.stale else price.source


def _problem(found: HourlyPrice | PriceProblem | None, host: Host) -> PriceProblem:
    if isinstance(found, PriceProblem):
        return found
    return PriceProblem("missing_price", f"{host.name}: no price")


def cost_of(energy: ItEnergy, price: PriceFor | None = None,
            factors: FactorsFor | None = None) -> Cost:
    """The cost of the GPUs measured in `energy` over its window: the model in this module's
    docstring, host by host and hour by hour."""
    price = price or cached_prices()
    factors = factors or cached_site_factors()
    start, end = energy.start, energy.end
    ran = running_hours(list(energy.hosts), start, end) if energy.hosts else {}
    out = Cost()
    sources: list[str] = []
    energy_hours: dict[int, list[dt.datetime]] = defaultdict(list)
    for host_id, bucket in energy.hours:
        energy_hours[host_id].append(bucket)
    for host_id, host in sorted(energy.hosts.items()):
        line = HostLine(host, energy.share(host_id))
        out.hosts[host_id] = line
        host_ran = ran.get(host_id, set())
        owned = existing_hours(host, start, end)
        line.running_hours = sum(overlap(b, start, end) for b in host_ran)
        for bucket in sorted(owned | host_ran | set(energy_hours[host_id])):
            hour = energy.hours.get((host_id, bucket))
            energy_j = hour.it_energy_j if hour is not None else 0.0
            lo, hi = max(bucket, start), min(bucket + HOUR, end)
            # An hour in which the host's terms changed is split at the change: each part
            # is billed and priced under the terms in force in it.
            for a, b in _parts(price, host, lo, hi):
                billed = bucket in host_ran or (bucket in owned and _committed(price, host, a))
                if not billed and not energy_j:
                    continue
                found = price(host, bucket, a) if isinstance(price, Prices) \
                    else price(host, bucket)
                if not isinstance(found, HourlyPrice):
                    line.problem = line.problem or _problem(found, host)
                    continue
                line.price = found
                sources.append(_label(found))
                if billed:
                    part = (b - a) / HOUR
                    line.billed_hours += part
                    line.hardware_usd += part * found.usd_per_hour * line.share
                if found.electricity_usd_per_kwh is not None and energy_j:
                    pue = factors(host, bucket).pue
                    line.electricity_usd += (energy_j * ((b - a) / (hi - lo)) / J_PER_KWH
                                             * pue * found.electricity_usd_per_kwh)
        if line.problem is not None:
            out.problems.append(line.problem.message)
    if out.problems:
        out.cost_usd = None
        names = sorted({line.host.name for line in out.hosts.values() if line.problem})
        out.source = "no price for " + ", ".join(names)
    else:
        out.cost_usd = sum(line.cost_usd or 0.0 for line in out.hosts.values())
        out.source = "; ".join(dict.fromkeys(sources))
    return out


@dataclass
class GpuUsage:
    gpu_id: int
    host_id: int
    # bucket -> (avg util % or None, energy J, peak memory MiB or None)
    hours: dict[dt.datetime, tuple[float | None, float, float | None]] = field(
        default_factory=dict)
    # bucket -> (minutes reported with a utilisation, of which under the idle threshold)
    minutes: dict[dt.datetime, tuple[int, int]] = field(default_factory=dict)

    def idle_minutes(self) -> int:
        return sum(idle for _, idle in self.minutes.values())

    def idle_hours(self, threshold_pct: float = IDLE_UTIL_PCT) -> float:
        """Idle GPU-hours: idle GPU-minutes / 60, judged minute by minute (an hourly average
        hides a GPU that idles 55 minutes of every hour). `threshold_pct` is fixed when the
        usage is collected; the argument stays for callers that pass the default."""
        return self.idle_minutes() / 60

    def idle_share(self, buckets: list[dt.datetime] | None = None) -> float | None:
        """Share of the reported minutes (in `buckets`, default all) under the threshold."""
        picked = [self.minutes[b] for b in (buckets if buckets is not None else self.minutes)
                  if b in self.minutes]
        n = sum(m for m, _ in picked)
        return sum(i for _, i in picked) / n if n else None

    @property
    def energy_kwh(self) -> float:
        return sum(e for _, e, _ in self.hours.values()) / J_PER_KWH

    # What the recommendations read, so that a summary (greenops.costs.month_cost.GpuSummary)
    # can stand in for the hour-by-hour usage of a long window.
    def hour_count(self) -> int:
        """Hours it reported in."""
        return len(self.hours)

    def first_hour(self) -> dt.datetime | None:
        return min(self.hours, default=None)

    def mem_max_mib(self) -> float | None:
        return max((m for _, _, m in self.hours.values() if m is not None), default=None)

    def latest(self) -> GpuUsage:
        """Its hours and minutes of the window's latest hours (here: all of them)."""
        return self


def gpu_usage(hosts: list[Host], start: dt.datetime, end: dt.datetime,
              idle_threshold_pct: float = IDLE_UTIL_PCT) -> dict[int, GpuUsage]:
    """Per GPU of these hosts: its hourly utilisation, energy and peak memory, and per hour its
    minutes reported and minutes idle (counted in the database from minute rollups)."""
    gpu_host = {g.id: h.id for h in hosts for g in h.gpus.all()}
    out: dict[int, GpuUsage] = {}
    # The hour rollups keep their minutes' counts at the standard threshold (maintained by the
    # ingest statement, greenops.telemetry.store): whole hours read them, not 60 minute rows
    # per GPU-hour. Another threshold, or a window cutting an hour, counts minute rollups; so
    # do the GPUs with an hour holding a utilisation but no minute counted, or with no hour
    # row at all (rollups written by something other than the ingest statement, which keeps
    # minutes and hours together): their minutes count wherever no hour counted them. A GPU
    # that did not report has no minute rows either: an index probe that finds nothing.
    from_hours = idle_threshold_pct == store.IDLE_UTIL_PCT and hour_aligned(start, end)
    counted: dict[int, set[dt.datetime]] = defaultdict(set)
    uncounted: set[int] = set()
    rows = GpuHour.objects.filter(
        gpu_id__in=list(gpu_host), bucket__gte=start, bucket__lt=end, samples__gt=0
    ).values_list("gpu_id", "bucket", "util_sum", "util_n", "energy_j", "mem_used_max_mib",
                  "util_minutes", "idle_minutes")
    for gpu_id, bucket, u_sum, u_n, e_j, mem, n, idle in rows.iterator(chunk_size=5000):
        usage = out.setdefault(gpu_id, GpuUsage(gpu_id, gpu_host[gpu_id]))
        usage.hours[bucket] = (u_sum / u_n if u_n else None, e_j, mem)
        if not from_hours:
            continue
        if n:
            usage.minutes[bucket] = (n, idle)
            counted[gpu_id].add(bucket)
        elif u_n:
            uncounted.add(gpu_id)
    gpu_ids = list(gpu_host)
    if from_hours:
        gpu_ids = [g for g in gpu_host if g in uncounted or g not in out]
        if not gpu_ids:
            return out
    minutes = (
        GpuMinute.objects.filter(gpu_id__in=gpu_ids, bucket__gte=start, bucket__lt=end,
                                 util_n__gt=0)
        .annotate(h=TruncHour("bucket")).values("gpu_id", "h")
        .annotate(n=Count("*"),
                  idle=Count("bucket", filter=Q(util_sum__lt=F("util_n") * idle_threshold_pct)))
        .values_list("gpu_id", "h", "n", "idle")
    )
    for gpu_id, bucket, n, idle in minutes.iterator(chunk_size=5000):
        hour = windows.floor_hour(bucket)
        if hour in counted[gpu_id]:
            continue
        usage = out.setdefault(gpu_id, GpuUsage(gpu_id, gpu_host[gpu_id]))
        usage.minutes[hour] = (n, idle)
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
    idle_gpu_hours: float = 0.0
    idle_cost_usd: float | None = None
    electricity_usd: float = 0.0

    @property
    def in_window(self) -> bool:
        """Whether the host ran, was paid for or drew energy in the window. One that did none of
        these cost nothing there whatever its price, so its missing price leaves every total
        known (the report leaves its row out; the pages, the API and alerts count it out)."""
        return bool(self.energy_kwh or self.running_hours or self.billed_hours)

    @property
    def usd_per_gpu_hour(self) -> float | None:
        if self.price is None or not self.gpu_count:
            return None
        return self.price.usd_per_hour / self.gpu_count


def host_costs(hosts: list[Host], usage: dict[int, GpuUsage], start: dt.datetime,
               end: dt.datetime, idle_threshold_pct: float = IDLE_UTIL_PCT,
               now: dt.datetime | None = None, price: PriceFor | None = None) -> list[HostCost]:
    """Each host's whole cost over [start, end) through `cost_of`, plus its idle GPU-hours
    (minutes under the threshold / 60) and their cost at the host's per-GPU price."""
    price = price or cached_prices(now)
    by_host: dict[int, list[GpuUsage]] = defaultdict(list)
    for u in usage.values():
        by_host[u.host_id].append(u)
    gpus = [g for h in hosts for g in h.gpus.all()]
    for g in gpus:
        g.host = next(h for h in hosts if h.id == g.host_id)
    energy = it_energy(gpus, start, end)
    cost = cost_of(energy, price)
    out = []
    for host in hosts:
        line = cost.hosts.get(host.id)
        # The row shows (and recommendations compare) today's catalog price; the cost above
        # used the price in force in each hour.
        found = host_price(host, now)
        latest = found if isinstance(found, HourlyPrice) else None
        # A host without a price is named even in a window it did not run in.
        problem = (line.problem if line is not None else None) or (
            found if isinstance(found, PriceProblem) else None)
        hc = HostCost(host, latest, problem, int(round(line.running_hours)) if line else 0,
                      int(round(line.billed_hours)) if line else 0,
                      energy.host_energy_j(host.id) / J_PER_KWH, len(host.gpus.all()))
        if problem is None:
            hc.cost_usd = line.cost_usd if line is not None else 0.0
            hc.electricity_usd = line.electricity_usd if line is not None else 0.0
        gpus_used = by_host.get(host.id, [])
        hc.idle_gpu_hours = sum(g.idle_hours() for g in gpus_used)
        if hc.usd_per_gpu_hour is not None and problem is None:
            hc.idle_cost_usd = idle_cost(host, gpus_used, price)
        out.append(hc)
    return out


def idle_cost(host: Host, gpus_used: list[GpuUsage], price: PriceFor) -> float | None:
    """Idle GPU-hours of each hour x the host's per-GPU price in force in that hour (a past
    month's idle cost keeps its own prices, like its cost); None if an hour has no price."""
    gpu_count = len(host.gpus.all())
    idle_by_hour: dict[dt.datetime, int] = defaultdict(int)  # one price lookup per hour
    for usage in gpus_used:
        for bucket, (_, idle) in usage.minutes.items():
            idle_by_hour[bucket] += idle
    total = 0.0
    for bucket, idle in idle_by_hour.items():
        if not idle:
            continue
        found = price(host, bucket)
        if not isinstance(found, HourlyPrice) or not gpu_count:
            return None
        total += idle / 60 * found.usd_per_hour / gpu_count
    return total


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

    def hourly_counts(self, hosts: list[Host]) -> list[int]:
        """Per hour of the window: how many of these hosts ran (any GPU reporting)."""
        ids = {h.id for h in hosts}
        running: dict[dt.datetime, set[int]] = defaultdict(set)
        for u in self.usage.values():
            if u.host_id in ids:
                for b in u.hours:
                    running[b].add(u.host_id)
        return [len(running.get(self.start + i * HOUR, ())) for i in range(self.window_hours)]


def collect(team: Team, lookback_days: int, now: dt.datetime | None = None,
            idle_threshold_pct: float = IDLE_UTIL_PCT) -> TeamUsage:
    w = windows.lookback(lookback_days, now)
    start, end = w.start, w.end
    hosts = list(team.hosts.prefetch_related("gpus"))
    usage = gpu_usage(hosts, start, end, idle_threshold_pct)
    rows = host_costs(hosts, usage, start, end, idle_threshold_pct, now)
    return TeamUsage(team, lookback_days, start, end, hosts, usage, rows)


def workload_cost(workload, tu: TeamUsage) -> tuple[float | None, float]:
    """(cost through `cost_of`, GPU-hours) of a workload's GPUs over the team usage window."""
    gpus = list(workload.gpu_queryset().select_related("host"))
    cost = cost_of(it_energy(gpus, tu.start, tu.end))
    # Hours each GPU reported in: a count (GpuUsage.hour_count), which a summed usage
    # (month_cost.GpuSummary) holds without its hours.
    gpu_hours = sum(tu.usage[g.id].hour_count() for g in gpus if g.id in tu.usage)
    return cost.cost_usd, gpu_hours


def team_costs(tu: TeamUsage, idle_threshold_pct: float = IDLE_UTIL_PCT) -> dict:
    workloads = []
    for w in tu.team.workloads.all():
        cost, gpu_hours = workload_cost(w, tu)
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
        "window_text": windows.lookback(tu.lookback_days, tu.end).text,
        "method": "host-hours the host ran (any GPU reporting) x the price of its purchase "
                  "option in force in each hour; commitments and owned hardware billed for "
                  "every hour of the window the host existed; on premises plus electricity "
                  "(GPU + CPU/RAM energy x PUE x $/kWh); the KPI pages use the same model",
        **cost_totals(tu, idle_threshold_pct),
        "stale_prices": any(r.price.stale for r in priced),
        "problems": problems,
        "hosts": [host_row_dict(r) for r in tu.rows],
        "workloads": workloads,
        "training_jobs": jobs,
    }


def cost_totals(tu: TeamUsage, idle_threshold_pct: float = IDLE_UTIL_PCT) -> dict:
    """The team's totals of `team_costs` alone (the team home's cards), without its per-workload
    costs and training jobs."""
    priced = [r for r in tu.rows if r.cost_usd is not None]
    unpriced = sum(1 for r in tu.rows if r.problem is not None and r.in_window)
    problems = unpriced > 0
    return {
        # No total when a host has no price: a partial sum shown as the total would be wrong.
        "total_cost_usd": sum(r.cost_usd for r in priced) if not problems else None,
        "priced_cost_usd": sum(r.cost_usd for r in priced),
        "idle_cost_usd": sum(r.idle_cost_usd or 0.0 for r in priced),
        "idle_threshold_pct": idle_threshold_pct,
        "unpriced_hosts": unpriced,  # hosts without a price that ran or were paid for
    }


def host_row_dict(r: HostCost) -> dict:
    p = r.price
    return {
        "host": r.host.name, "host_id": r.host.id, "instance_type": r.host.instance_type,
        "region": r.host.region, "purchase_option": r.host.purchase_option,
        "running_hours": r.running_hours, "billed_hours": r.billed_hours,
        "energy_kwh": r.energy_kwh, "cost_usd": r.cost_usd,
        "electricity_usd": r.electricity_usd,
        "idle_gpu_hours": r.idle_gpu_hours, "idle_cost_usd": r.idle_cost_usd,
        "usd_per_hour": p.usd_per_hour if p else None,
        "price_source": p.source if p else None,
        "price_as_of": p.as_of.isoformat() if p and p.as_of else None,
        "price_stale": p.stale if p else None,
        "problem": r.problem.message if r.problem else None,
        "problem_code": r.problem.code if r.problem else None,
    }
