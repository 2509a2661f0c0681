"""The team home's read side: the headline figures of the product, each from the app that owns
it (KPIs: energy, carbon, inferences, utilisation; costs: cost, idle cost, unpriced hosts,
recommendations), with its change against the previous period and the page that explains it.

Nothing is computed here that its owner does not compute for its own page: the home shows the
same figure the linked page shows.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field

from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from dashboards import refresh
from greenops import windows
from greenops.alerts.models import FIRING_STATES, Rule
from greenops.carbon import accounting as carbon_accounting
from greenops.costs import accounting, month_cost
from greenops.costs import models as cost_models
from greenops.costs.team_recommendations import team_recommendations
from greenops.kpis import metrics
from greenops.kpis import queries as kpi_queries
from greenops.kpis import rollup as kpi_rollup
from greenops.kpis.models import KpiRollup, Period
from greenops.teams.models import Team
from greenops.telemetry.models import Gpu, Host, devices_noun
from greenops.telemetry.queries import RANGES as PAGE_RANGES
from greenops.workloads.models import Workload

TOP_RECOMMENDATIONS = 3
RECOMMENDATION_LOOKBACK_DAYS = 30
# A daily chart shorter than this says little: the home shows at least a week of days.
MIN_DAILY_SPAN = dt.timedelta(days=7)


@dataclass
class Card:
    key: str
    label: str
    value: float | None
    unit: str
    digits: int
    href: str
    change_pct: float | None = None
    # Why the value is unknown, or what it leaves out ("2 hosts without a price").
    note: str = ""
    prefix: str = ""
    fix_href: str = ""  # where a user fixes what blanks or limits the figure
    fix_label: str = ""
    pending: bool = False  # being computed: nothing to compare yet either


@dataclass
class Unpriced:
    hosts: list[dict] = field(default_factory=list)  # {name, id, message}
    gpu_hours: int = 0

    @property
    def count(self) -> int:
        return len(self.hosts)

    def sentence(self) -> str:
        s = "" if self.count == 1 else "s"
        return f"{self.count} host{s} unpriced ({self.gpu_hours:,} GPU-hours without a price)"


def kpi_range(range_key: str) -> str:
    """The KPI range of a page range: KPIs roll up hourly, so the last hour shows the last
    24 hours' cards (and says so)."""
    return range_key if range_key in kpi_queries.RANGES and range_key != "hour" else "day"


def unpriced(tu: accounting.TeamUsage) -> Unpriced:
    out = Unpriced()
    missing = [r for r in tu.rows if r.problem is not None and r.in_window]
    if not missing:
        return out
    # GPU-hours per host in one pass over the GPUs (not one pass per unpriced host).
    hours: dict[int, int] = {}
    for u in tu.usage.values():
        hours[u.host_id] = hours.get(u.host_id, 0) + u.hour_count()
    for r in missing:
        out.hosts.append({"name": r.host.name, "id": r.host.id, "message": r.problem.message})
        out.gpu_hours += hours.get(r.host.id, 0)
    return out


class Usage:
    """The team's cost figures per window for one page view (or one snapshot), each computed
    once: the cost cards, the month to date and the recommendations ask for the same window
    more than once (the month range's cards and the recommendations both read the last 30
    days), and at 1,000 GPUs each window is a second or more (costs.month_cost.team_usage).

    `figures` (window -> result) is what a snapshot stores (see page_figures); `now` is the
    clock the cost windows are taken from: the page's, or the snapshot's when it is read."""

    def __init__(
        self,
        figures: dict | None = None,
        now: dt.datetime | None = None,
        computed_at: dt.datetime | None = None,
        frozen: bool = False,
        state: str = "current",
    ) -> None:
        self._seen: dict[tuple, accounting.TeamUsage] = {}
        self.figures: dict[tuple, object] = dict(figures or {})
        self.now = now
        self.computed_at = computed_at
        self.added = False
        # A page's Usage is frozen: it reads the figures a snapshot holds and never computes one
        # (at 1,000 GPUs a window takes seconds to minutes: a task computes them, see
        # page_figures). A figure it lacks is `pending` ("being computed"), never a 0.
        self.frozen = frozen
        self.pending = False
        # "current": this hour's snapshot at the current generation; "stale": the last one the
        # team has (an hour or an edit older), shown with its time while a task refreshes it;
        # "none": no snapshot at all, the cost figures are being computed.
        self.state = state

    def __call__(self, team: Team, days: float, now: dt.datetime) -> accounting.TeamUsage:
        w = windows.lookback(days, now)  # type: ignore[arg-type]
        key = (team.id, w.start, w.end)
        if key not in self._seen:
            self._seen[key] = month_cost.team_usage(team, days, now)
        return self._seen[key]

    def _figure(self, key: tuple, compute, pending=None):
        if key not in self.figures:
            if self.frozen:
                self.pending = True
                return pending
            self.figures[key] = compute()
            self.added = True
        return self.figures[key]

    def costs(self, team: Team, days: float, now: dt.datetime) -> tuple[dict, Unpriced]:
        w = windows.lookback(days, now)  # type: ignore[arg-type]

        def compute() -> tuple[dict, Unpriced]:
            tu = self(team, days, now)
            return accounting.cost_totals(tu), unpriced(tu)

        return self._figure(
            ("costs", team.id, w.start, w.end),
            compute,  # type: ignore[return-value]
            (dict(PENDING_COSTS), Unpriced()),
        )

    def recommendations(self, team: Team, now: dt.datetime) -> list[dict]:
        w = windows.lookback(RECOMMENDATION_LOOKBACK_DAYS, now)

        def compute() -> list[dict]:
            tu = self(team, RECOMMENDATION_LOOKBACK_DAYS, now)
            recs = team_recommendations(team, RECOMMENDATION_LOOKBACK_DAYS, now, usage=tu)[
                "recommendations"
            ]
            return [r for r in recs if r["monthly_usd_saved"] > 0][:TOP_RECOMMENDATIONS]

        return self._figure(
            ("recommendations", team.id, w.start, w.end),  # type: ignore[return-value]
            compute,
            [],
        )


# A cost figure a frozen Usage does not hold yet: unknown, never 0 (the page says why).
PENDING_COSTS = {
    "total_cost_usd": None,
    "priced_cost_usd": None,
    "idle_cost_usd": None,
    "idle_threshold_pct": accounting.IDLE_UTIL_PCT,
}


def _costs(
    team: Team, days: float, now: dt.datetime, usage: Usage | None = None
) -> tuple[dict, Unpriced]:
    return (usage or Usage()).costs(team, days, now)


# ---- Snapshots: the cost figures of the team home, per team and hour ----------------------------
# Cost windows end at the start of the current hour (windows.lookback), so a snapshot taken in an
# hour holds the figures every page view of that hour computes. Beat (dashboards.tasks) takes one
# per team every few minutes on the rollups queue; a page finding none for this hour reads the
# previous hour's (its figures then cover windows ending an hour earlier, and say "as of"), and
# with neither computes its figures and stores them. The key holds the team id: a page reads only
# its own team's snapshot.
SNAPSHOT_TTL_S = 3 * 3600
# Beat retakes a snapshot older than this (late samples, price edits reach the page by then).
SNAPSHOT_REFRESH_S = 15 * 60
# The last snapshot of a team, shown (with its time) while its current one is being computed.
LATEST_TTL_S = 7 * 86400


# Generations: the shared one (the price catalog, which every team's costs read) and one per
# team (its hosts, GPUs, overrides, sites, workloads). An edit bumps the one it belongs to, so
# one team's host edit leaves the other teams' snapshots valid (at 1,000 GPUs a team's cost
# figures take tens of seconds to compute again).
GENERATION_KEY = "team-home:generation"


def team_generation_key(team_id: int) -> str:
    return f"{GENERATION_KEY}:{team_id}"


def _team_of(instance) -> int | None:
    """The team whose cost figures an edited row changes (directly, or through its host);
    None for the shared catalog (prices, price periods, instance types)."""
    team_id = getattr(instance, "team_id", None)
    if team_id is None and getattr(instance, "host_id", None) is not None:
        team_id = Host.objects.filter(id=instance.host_id).values_list("team_id", flat=True).first()
    return team_id


def pricing_changed(instance=None, created: bool = False, **kwargs) -> None:
    """Signal receiver (dashboards.apps): something a cost depends on was edited; that team's
    snapshots (every team's, for the shared catalog) taken before no longer match any key."""
    if created and getattr(instance, "valid_from", None) in (cost_models.SINCE_EVER,
                                                             carbon_accounting.SINCE_EVER):
        # A host's first pricing records the terms and site factors it already had, in force
        # since ever (HostTermsPeriod.ensure, ensure_factors): no figure changes. Counted as an
        # edit, the first cost figures of a new host made every figure just kept for its team
        # stale at once, and its page said "refreshing" again.
        return
    team_id = _team_of(instance) if instance is not None else None
    key = GENERATION_KEY if team_id is None else team_generation_key(team_id)
    try:
        cache.incr(key)
    except ValueError:  # not set yet (or evicted)
        cache.set(key, 1, None)


def _generations(team_id: int) -> tuple[str, int]:
    """The cost figures' generation (the shared one and the team's, "shared:team") and the
    team's KPI generation (kpis.rollup), read in one cache round trip."""
    keys = [GENERATION_KEY, team_generation_key(team_id), kpi_rollup.generation_key(team_id)]
    found = cache.get_many(keys)
    return f"{found.get(keys[0], 0)}:{found.get(keys[1], 0)}", found.get(keys[2], 0)


def _generation(team_id: int) -> str:
    return _generations(team_id)[0]


def snapshot_key(
    team_id: int, hour: dt.datetime, generation: str | None = None, created: float | None = None
) -> str:
    """Where a team's cost snapshot of `hour` lives. `created` (the team's creation time, as
    kpis_key keeps it) keeps a team id used again -- a new database beside the same cache --
    from reading another team's figures."""
    generation = generation or _generation(team_id)
    if created is None:
        found = Team.objects.filter(id=team_id).values_list("created_at", flat=True).first()
        created = found.timestamp() if found else 0.0
    return f"team-home:v3:{team_id}:{created:.6f}:{hour:%Y%m%dT%H}:{generation}"


def latest_key(team_id: int, created: float) -> str:
    """Where the last snapshot a team had is kept, whatever its hour and generation: what a page
    shows, labelled with its time, while a task computes the current one."""
    return f"team-home:latest:v1:{team_id}:{created:.6f}"


def page_figures(team: Team, range_key: str, now: dt.datetime) -> tuple[Usage, dict, dict]:
    """What the team home reads from the cache, in two round trips (the generations, then the
    entries): its cost figures -- this hour's snapshot, else the previous hour's, else the last
    one the team had (an edit or an hour older), else none -- and its KPI figures at the range
    (kpi_figures): the current ones, else computed here when that is quick, else the last ones
    the team had at the range, else none. Returns (usage, kpis, {"state", "computed_at"} of
    the KPI figures).

    The cost figures are never computed here: at 1,000 GPUs they take tens of seconds, which
    a visitor after a price edit or a Redis restart would wait for. The Usage returned is
    frozen; unless its state is "current" the caller queues dashboards.tasks.refresh_team_home
    and the page shows what it has with its time, or says the figures are being computed. The
    same for the KPI figures unless their state is "current" (refresh_team_kpis)."""
    generations = _generations(team.id)
    hour = windows.floor_hour(now)
    created = team.created_at.timestamp()
    keys = [
        snapshot_key(team.id, h, generations[0], created)
        for h in (hour, hour - dt.timedelta(hours=1))
    ] + [latest_key(team.id, created)]
    kpi_keys = [kpis_key(team, range_key, now, generations),
                kpis_latest_key(team, range_key)]
    found = cache.get_many([*keys, *kpi_keys])
    snap, state = refresh.pick(found, keys, team.id)
    usage = Usage(now=now, computed_at=None, frozen=True, state=state)
    if snap is not None:
        usage = Usage(snap["figures"], now=snap["now"], computed_at=snap["computed_at"],
                      frozen=True, state=state)
    kept, kpis_state = refresh.pick(found, kpi_keys, team.id)
    if kpis_state != refresh.CURRENT and _kpis_quick(team, kept):
        kept, kpis_state = _keep_kpis(team, range_key, now, kpi_keys[0]), refresh.CURRENT
    if kept is None:
        return usage, pending_kpi_figures(team, range_key, now), {"state": kpis_state,
                                                                   "computed_at": None}
    return usage, kept["figures"], {"state": kpis_state, "computed_at": kept["computed_at"]}


def save_snapshot(team: Team, usage: Usage) -> None:
    """Store what `usage` holds (when it computed anything new) as the team's snapshot of the
    hour its figures were taken in."""
    if not usage.added or usage.now is None:
        return
    created = team.created_at.timestamp()
    snap = {
        "team_id": team.id,
        "now": usage.now,
        "computed_at": usage.computed_at,
        "figures": usage.figures,
    }
    cache.set_many(
        {snapshot_key(team.id, windows.floor_hour(usage.now), None, created): snap}, SNAPSHOT_TTL_S
    )
    cache.set(latest_key(team.id, created), snap, LATEST_TTL_S)


def take_snapshot(team: Team, now: dt.datetime | None = None) -> Usage:
    """Compute every cost figure the team home shows, at every range, and store them."""
    now = now or timezone.now()
    usage = Usage(now=now, computed_at=timezone.now())
    for key in dict.fromkeys(kpi_range(k) for k in PAGE_RANGES):
        span = kpi_queries.RANGES[key].span
        days = span.total_seconds() / 86400
        usage.costs(team, days, now)
        usage.costs(team, days, now - span)
    _month_costs(team, now, usage)
    usage.recommendations(team, now)
    usage.added = True
    save_snapshot(team, usage)
    return usage


# ---- The KPI figures of the team home, kept until the team's KPI rollups change -------------
# The cards, the month to date and the daily bars read only KPI rollup rows, which beat rewrites
# every few minutes (kpis.rollup) while the page is viewed far more often: they are computed
# once per change of those rows (the KPI generation, bumped on commit by their one writer), of
# the team's own generation (its workloads' names, hosts), of the hour their windows end at and
# of the month the team's time zone is in. The key carries the team's creation time as well, so
# a team id used again (a test database made anew beside a shared Redis) never reads another
# team's figures.
KPIS_TTL_S = 2 * 3600


# A page computes the KPI figures itself only when that is quick: when the team's last ones
# took under KPI_INLINE_S, or, with none kept (a cold cache), for a team of at most
# KPI_INLINE_HOSTS hosts. Otherwise it shows the last ones the team had at the range (labelled
# with their time) or says they are being computed, and dashboards.tasks.refresh_team_kpis
# computes them: the page never waits on them (issue 35: a cold cache took 15-32 s at 10,000
# GPUs).
KPI_INLINE_S = 0.25
KPI_INLINE_HOSTS = 64
KPIS_LATEST_TTL_S = 7 * 86400


def kpi_figures(team: Team, range_key: str, now: dt.datetime) -> dict:
    """What the team home reads from KPI rollups at `range_key`, computed now."""
    month = month_window(team, now)
    return {
        "overview": kpi_queries.overview(team, None, kpi_range(range_key), now),
        "month": _month_kpis(team, month),
        "month_coverage": kpi_queries.host_hours(team, month.start, month.end)
        if month is not None
        else None,
        "daily": daily_by_workload(team, range_key, now),
    }


def pending_kpi_figures(team: Team, range_key: str, now: dt.datetime) -> dict:
    """kpi_figures' shape with no figure in it (unknown, never 0): what a page shows while
    they are being computed, over the windows they will cover."""
    w = kpi_queries.window(kpi_range(range_key), now)
    month = month_window(team, now)
    return {
        "overview": {"current": {}, "previous": {}, "change_pct": {}, "comparable": False,
                     "previous_partial": False, "start": w.start.isoformat(),
                     "end": w.end.isoformat(), "window_text": w.text,
                     "coverage": {"text": ""},  # the page says they are being computed
                     "coverage_flag": ""},
        "month": {},
        "month_coverage": {"text": "being computed"} if month is not None else None,
        "daily": {"t": [], "simulated": False, "cost_usd": {}, "co2e_kg": {}},
    }


def _kpis_quick(team: Team, kept: dict | None) -> bool:
    if kept is not None:
        return kept.get("took_s", float("inf")) < KPI_INLINE_S
    return Host.objects.filter(team=team).count() <= KPI_INLINE_HOSTS


def _keep_kpis(team: Team, range_key: str, now: dt.datetime, key: str) -> dict:
    """Compute the KPI figures at the range and keep them under `key` (their generations') and
    as the team's last ones at the range, with when and how long they took."""
    t0 = time.perf_counter()
    figures = kpi_figures(team, range_key, now)
    entry = {"team_id": team.id, "figures": figures, "computed_at": timezone.now(),
             "took_s": time.perf_counter() - t0}
    cache.set_many({key: entry}, KPIS_TTL_S)
    cache.set(kpis_latest_key(team, range_key), entry, KPIS_LATEST_TTL_S)
    return entry


def keep_kpi_figures(team: Team, range_key: str, now: dt.datetime) -> dict:
    """dashboards.tasks.refresh_team_kpis: the KPI figures at the range, computed and kept for
    the page. The key is read before computing: rows written meanwhile move the generation,
    and the next view refreshes again rather than keep older figures as current."""
    return _keep_kpis(team, range_key, now, kpis_key(team, range_key, now))


def kpis_key(
    team: Team, range_key: str, now: dt.datetime, generations: tuple[str, int] | None = None
) -> str:
    """Where page_figures keeps kpi_figures(team, range_key, now)."""
    cost_generation, kpi_generation = generations or _generations(team.id)
    month = windows.month_containing(now, team.time_zone)
    return (
        f"team-home:kpis:v2:{team.id}:{team.created_at.timestamp():.6f}:"
        f"{kpi_range(range_key)}:{windows.floor_hour(now):%Y%m%dT%H}:"
        f"{month.start:%Y%m%dT%H%M}:{kpi_generation}:{cost_generation}"
    )


def kpis_latest_key(team: Team, range_key: str) -> str:
    """Where the last KPI figures the team had at the range are kept, whatever their hour and
    generations: what a page shows, labelled with their time, while a task computes them."""
    return (f"team-home:kpis-latest:v1:{team.id}:{team.created_at.timestamp():.6f}:"
            f"{kpi_range(range_key)}")


def headline(
    team: Team,
    range_key: str,
    now: dt.datetime | None = None,
    usage: Usage | None = None,
    kpis: dict | None = None,
    kpis_kept: dict | None = None,
) -> dict:
    """The cards; `kpis`: kpi_figures (or page_figures') of the same team, range and clock;
    `kpis_kept`: page_figures' word on them ({"state", "computed_at"}; computed now if None)."""
    kpis_kept = kpis_kept or {"state": refresh.CURRENT, "computed_at": None}
    now = now or timezone.now()
    usage = usage or Usage(now=now)
    kpis = kpis or kpi_figures(team, range_key, now)
    cnow = usage.now or now  # the cost figures' clock: a snapshot's may be an hour behind
    key = kpi_range(range_key)
    ov = kpis["overview"]
    label, span = kpi_queries.RANGES[key].label, kpi_queries.RANGES[key].span
    days = span.total_seconds() / 86400
    costs_now, missing = _costs(team, days, cnow, usage)
    costs_before, missing_before = _costs(team, days, cnow - span, usage)
    cur, change = ov["current"], ov["change_pct"]
    slug = team.slug
    kpis_url = reverse("kpi-overview", args=[slug]) + f"?range={key}"
    costs_url = reverse("costs-recommendations", args=[slug])
    prices_url = reverse("price-overrides", args=[slug])

    # The team's devices by their kind (issue 33): "GPU" only where every device is one.
    # order_by(): the model's ordering would add its columns to the DISTINCT (a row per GPU).
    kinds = set(Gpu.objects.filter(host__team=team).order_by().values_list("kind", flat=True)
                .distinct())
    one, many = devices_noun(kinds, plural=False), devices_noun(kinds)
    one_cap = one[:1].upper() + one[1:]
    cost = Card("cost_usd", "Cost", costs_now["priced_cost_usd"], "", 2, costs_url,
                prefix="$")
    if missing.count:
        # The partial-sum rule (README, accounting): a sum with unknown parts is a lower bound
        # and names them -- "≥ $X", "2 hosts unpriced".
        cost.prefix = "≥ $"
        cost.note = missing.sentence()
        cost.fix_href, cost.fix_label = prices_url, "set prices"
    elif not missing_before.count:
        cost.change_pct = metrics.change_pct(costs_now["total_cost_usd"],
                                             costs_before["total_cost_usd"])
    idle = Card("idle_cost_usd", f"Idle {one} cost", costs_now["idle_cost_usd"], "", 2,
                costs_url, prefix="$",
                note=f"{one}-hours under {costs_now['idle_threshold_pct']:g} % utilisation")
    if costs_now["priced_cost_usd"] is None:  # a frozen Usage without this window yet
        cost.note = idle.note = "being computed"
        cost.pending = idle.pending = True
    if not missing.count and not missing_before.count:
        idle.change_pct = metrics.change_pct(
            costs_now["idle_cost_usd"], costs_before["idle_cost_usd"]
        )
    if not ov["comparable"]:  # a previous period only partly measured: no trend to show
        cost.change_pct = idle.change_pct = None
    # The KPI engine divides the inference workloads' energy and cost (not the training
    # GPUs') by their inferences; the home shows its figures.
    epi = Card("energy_per_inference_j", "Energy per inference",
               cur.get("energy_per_inference_j"), "J", 1, kpis_url,
               change.get("energy_per_inference_j"),
               f"IT energy of the serving {many} ÷ their inferences")
    per_1k = Card("cost_per_1k_inferences_usd", "Cost per 1k inferences",
                  cur.get("cost_per_1k_inferences_usd"), "", 4, kpis_url, prefix="$")
    if ov["comparable"]:
        per_1k.change_pct = metrics.change_pct(
            cur.get("cost_per_1k_inferences_usd"), ov["previous"].get("cost_per_1k_inferences_usd")
        )
    if not cur.get("requests"):
        epi.note = per_1k.note = "no inferences reported"
    elif per_1k.value is None:
        per_1k.note = ("unknown: " + missing.sentence() if missing.count
                       else f"unknown: no price for the serving {many}")
        per_1k.fix_href, per_1k.fix_label = prices_url, "set prices"
    cards = [
        cost,
        Card("gpu_energy_kwh", f"{one_cap} energy", cur.get("gpu_energy_kwh"), "kWh", 2, kpis_url,
             change.get("gpu_energy_kwh"), "part of IT energy"),
        Card("energy_kwh", "IT energy", cur.get("energy_kwh"), "kWh", 2, kpis_url,
             change.get("energy_kwh"), f"{many} + CPU + RAM"),
        Card("facility_energy_kwh", "Facility energy", cur.get("facility_energy_kwh"), "kWh",
             2, kpis_url, change.get("facility_energy_kwh"), "IT energy × PUE"),
        Card("co2e_kg", "Carbon", cur.get("co2e_kg"), "kg CO2e", 2,
             reverse("carbon-methodology"), change.get("co2e_kg"),
             "facility energy × grid intensity"),
        Card("requests", "Inferences", cur.get("requests"), "", 0, kpis_url,
             change.get("requests")),
        epi,
        per_1k,
        Card("gpu_util_pct", f"{one_cap} utilisation", cur.get("gpu_util_pct"), "%", 1, "#charts",
             change.get("gpu_util_pct")),
        idle,
    ]
    if kpis_kept["state"] == refresh.NONE:  # no KPI figure yet: unknown, and why
        for c in cards:
            if c.key not in ("cost_usd", "idle_cost_usd"):
                c.note, c.fix_href, c.pending = "being computed", "", True
    return {
        "range": key,
        "label": label,
        "start": ov["start"],
        "end": ov["end"],
        "window_text": ov.get("window_text", ""),
        "cards": cards,
        "comparable": ov["comparable"],
        "previous_partial": ov["previous_partial"],
        "simulated": cur.get("simulated"),
        "coverage": ov.get("coverage") or {"text": ""},
        "coverage_flag": ov.get("coverage_flag", ""),
        "unpriced": missing,
        "costs": costs_now,
        "month": month_to_date(team, now, usage, kpis["month"], kpis.get("month_coverage")),
        # When the cost figures were computed and the hour their windows end at.
        "costs_as_of": usage.computed_at,
        "costs_end": windows.floor_hour(cnow),
        "costs_state": usage.state,
        "costs_pending": usage.pending,
        # When the KPI figures (every card but cost and idle cost, the month's energy, carbon
        # and inferences) were computed: "current", else the last ones ("stale") or none yet.
        "kpis_state": kpis_kept["state"],
        "kpis_as_of": kpis_kept["computed_at"],
        "end_hour": windows.floor_hour(now),
    }


def month_window(team: Team, now: dt.datetime) -> windows.Window | None:
    """This calendar month in the team's time zone so far (whole finished hours, as its report
    counts them); None in its first hour, before any hour of it has finished."""
    month = windows.month_containing(now, team.time_zone)
    if windows.floor_hour(now) <= month.start:
        return None
    return windows.so_far(month, now)


def _month_kpis(team: Team, month: windows.Window | None) -> dict:
    if month is None:
        return {}
    return kpi_queries.kpis(
        team,
        None,
        month.start,
        month.end,
        Period.HOUR,
        kpi_queries.rows_by_day(team, None, month.start, month.end),
    )


def month_to_date(
    team: Team,
    now: dt.datetime,
    usage: Usage | None = None,
    month_kpis: dict | None = None,
    coverage: dict | None = None,
) -> dict:
    """This calendar month (in the team's time zone) so far: cost (priced hosts), IT energy,
    carbon, inferences. `month_kpis`: kpi_figures' "month", when the caller has it."""
    w = month_window(team, now)
    month = windows.month_containing(now, team.time_zone)
    k = month_kpis if month_kpis is not None else _month_kpis(team, w)
    costs, missing = _month_costs(team, (usage.now if usage else None) or now, usage)
    return {
        "start": month.start,
        "end": w.end if w else month.start,
        "label": w.label if w else month.label,
        "text": w.text if w else f"{month.label}: no hour finished yet",
        "month": f"{month.start.astimezone(windows.time_zone(month.tz)):%Y-%m}",
        "cost_usd": costs["priced_cost_usd"],
        "unpriced": missing,
        "energy_kwh": k.get("energy_kwh"),
        "co2e_kg": k.get("co2e_kg"),
        "requests": k.get("requests"),
        "coverage": coverage
        or (kpi_queries.host_hours(team, w.start, w.end) if w else {"text": ""}),
    }


def _month_costs(team: Team, now: dt.datetime, usage: Usage | None = None) -> tuple[dict, Unpriced]:
    """Cost of this calendar month so far: accounting counts whole hours up to the start of
    the current one (windows.lookback), the window month_window prints."""
    w = month_window(team, now)
    days = (w.end - w.start).total_seconds() if w is not None else 0
    if not days:  # the month's first hour: no whole hour finished yet, so nothing billed yet
        return (
            {
                "total_cost_usd": 0.0,
                "priced_cost_usd": 0.0,
                "idle_cost_usd": 0.0,
                "idle_threshold_pct": accounting.IDLE_UTIL_PCT,
            },
            Unpriced(),
        )
    return _costs(team, days / 86400, now, usage)


def top_recommendations(
    team: Team,
    now: dt.datetime | None = None,
    limit: int = TOP_RECOMMENDATIONS,
    usage: Usage | None = None,
) -> list[dict]:
    """The recommendations with the largest monthly savings, as the Costs page ranks them."""
    now = now or timezone.now()
    usage = usage or Usage(now=now)
    return usage.recommendations(team, usage.now or now)[:limit]


def daily_by_workload(team: Team, range_key: str, now: dt.datetime | None = None) -> dict:
    """Cost and carbon per day, stacked by workload, plus the GPUs no workload claims (the
    team's total minus its workloads'). A day whose cost is unknown for a workload (no price)
    has no bar for it rather than a zero."""
    now = now or timezone.now()
    key = kpi_range(range_key)
    span = max(kpi_queries.RANGES[key].span, MIN_DAILY_SPAN)
    end = windows.floor_day(now) + dt.timedelta(days=1)
    start = end - span
    rows = KpiRollup.objects.filter(team=team, period=Period.DAY, bucket__gte=start, bucket__lt=end)
    days = [start + dt.timedelta(days=i) for i in range(span.days)]
    index = {d: i for i, d in enumerate(days)}
    names = dict(Workload.objects.filter(team=team).values_list("id", "name"))
    cost: dict[str, list[float | None]] = {}
    co2e: dict[str, list[float | None]] = {}
    team_cost: list[float | None] = [None] * len(days)
    team_co2e: list[float | None] = [None] * len(days)
    simulated = False
    for r in rows:
        i = index.get(r.bucket)
        if i is None:
            continue
        simulated = simulated or r.simulated
        if r.workload_id is None:
            team_cost[i], team_co2e[i] = r.cost_usd, r.co2e_g / 1000
            continue
        name = names.get(r.workload_id, "?")
        cost.setdefault(name, [None] * len(days))[i] = r.cost_usd
        co2e.setdefault(name, [None] * len(days))[i] = r.co2e_g / 1000
    rest = "GPUs in no workload"
    cost[rest] = _remainder(team_cost, cost)
    co2e[rest] = _remainder(team_co2e, co2e)
    return {
        "t": [d.date().isoformat() for d in days],
        "simulated": simulated,
        "cost_usd": {k: _round(v, 2) for k, v in cost.items() if any(v)},
        "co2e_kg": {k: _round(v, 3) for k, v in co2e.items() if any(v)},
    }


def _remainder(
    total: list[float | None], parts: dict[str, list[float | None]]
) -> list[float | None]:
    out: list[float | None] = []
    for i, t in enumerate(total):
        if t is None:
            out.append(None)
            continue
        # Workloads that share GPUs can add up to more than the team: never a negative bar.
        out.append(max(t - sum(p[i] or 0.0 for p in parts.values()), 0.0))
    return out


def _round(values: list[float | None], digits: int) -> list[float | None]:
    return [None if v is None else round(v, digits) for v in values]


@dataclass
class Firing:
    """What the team's alert rules say now: the rules firing and how many rules are watched."""

    rules: list
    rules_total: int


def firing_alerts(team: Team) -> Firing:
    """The team's firing alert rules (state as the alerts evaluator last wrote it) and the
    number of enabled rules, so an empty list can say how much is being watched."""
    rules = Rule.objects.filter(team=team)
    # The enabled rules' states first (a few columns of a team's rules: cheaper to build than
    # an aggregate with two filtered counts): most views find nothing firing, and the page's
    # joined query (scope, workload, channels) is then not worth building.
    states = list(rules.filter(enabled=True).values_list("state", flat=True))
    firing = list(rules.firing().for_page()) if set(FIRING_STATES) & set(states) else []
    return Firing(rules=firing, rules_total=len(states))
