"""A team's recommendations: reads usage and prices, hands them to the pure functions in
recommend.py, and labels every figure with the age and source of the prices behind it."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import asdict

from greenops import windows
from greenops.carbon.accounting import SiteFactors, location_intensity, site_factors, site_pue
from greenops.carbon.models import HostSite
from greenops.costs import recommend as rec
from greenops.costs.accounting import (
    IDLE_UTIL_PCT,
    J_PER_KWH,
    GpuUsage,
    HostCost,
    TeamUsage,
)
from greenops.costs.catalog import find_price, is_stale
from greenops.costs.models import HOURS_PER_MONTH, InstanceType, Payment, Price, PriceOption
from greenops.costs.month_cost import team_usage
from greenops.teams.models import Team
from greenops.telemetry.models import Host, PurchaseOption
from greenops.units import plural

MIN_COMMIT_DAYS = 30  # a commitment is sized on at least this much measured history
# Monthly savings of spot, stop-idle, consolidation and right-sizing are projected from the
# latest BASIS_DAYS of history whatever lookback the page shows, so that a busy last week does
# not make a 7-day lookback promise four times what the 30-day one does (issue 8 item 14).
BASIS_DAYS = 30
IDLE_HOURS = 48  # "idle for days": reported in every one of the last 48 hours, and
IDLE_SHARE = 0.9  # under the threshold in at least 90% of those minutes (minute rollups: an
# hourly average hides a GPU that idles 54 minutes of every hour)


class Lookups:
    """What the recommendations look up per host -- its site factors, its instance type, the
    on-demand offers of its region -- read for all hosts at once and kept for the call, so a
    team's recommendations cost the same number of queries for 2 hosts as for 125."""

    def __init__(self, team_id: int, hosts: list[Host]) -> None:
        self.read = {h.id for h in hosts if h.team_id == team_id}
        self.sites = {hs.host_id: hs for hs in
                      HostSite.objects.filter(host__team_id=team_id).select_related("site")}
        self._types: dict[tuple[str, str], InstanceType] | None = None
        self._offers: dict[str, list[tuple[rec.InstanceOffer, Price]]] = {}

    def site_factors(self, host: Host) -> SiteFactors:
        """carbon.accounting.site_factors, from the host sites read once."""
        if host.id not in self.read:
            return site_factors(host)  # a host outside those read (not one of the team's)
        hs = self.sites.get(host.id)  # None: no site, the defaults
        pue, pue_source = site_pue(hs)
        found = location_intensity(hs.site if hs is not None else None, host)
        return SiteFactors(pue, pue_source, found.g_per_kwh, found.source)

    def instance_type(self, provider: str, name: str) -> InstanceType | None:
        if self._types is None:
            self._types = {(t.provider, t.name): t for t in InstanceType.objects.all()}
        return self._types.get((provider, name))

    def offers(self, region: str) -> list[tuple[rec.InstanceOffer, Price]]:
        if region not in self._offers:
            self._offers[region] = _offers(region)
        return self._offers[region]


def carbon_factors(host: Host, pue: float | None, intensity: float | None,
                   lookups: Lookups | None = None) -> tuple[float, float | None, str]:
    """PUE and grid intensity for a host (the caller's figures, else the carbon app's) and a
    label naming the host, region and sources: a recommendation's CO2e is labelled with the
    factors that computed it, never with another host's region."""
    if pue is not None or intensity is not None:
        return pue or 1.0, intensity, "given"
    f = lookups.site_factors(host) if lookups is not None else site_factors(host)
    where = f"{host.name}" + (f" ({host.region})" if host.region else "")
    return f.pue, f.intensity_g_per_kwh, (
        f"{where}: PUE {f.pue:g} ({f.pue_source}); {f.intensity_g_per_kwh:g} g CO2e/kWh "
        f"({f.intensity_source})")


def spot_used(p: Price) -> tuple[float, str, str]:
    """(the spot $/h advice uses, since when it is in force, what it is): the latest price
    when the refresh stored one -- spot moves hourly, and a 7-day median can lag it by days --
    else the stored figure, as of its date."""
    if p.latest_usd_per_hour is not None:
        since = (p.detail or {}).get("last_change_at") or p.as_of.isoformat()
        return float(p.latest_usd_per_hour), since, "latest"
    return float(p.usd_per_hour), p.as_of.isoformat(), "stored"


def _price_info(p: Price, now: dt.datetime | None) -> dict:
    info = {"label": p.label, "usd_per_hour": float(p.usd_per_hour), "source": p.source,
            "as_of": p.as_of.isoformat(), "stale": is_stale(p, now)}
    if p.option == PriceOption.SPOT:
        used, since, what = spot_used(p)
        info.update(usd_per_hour=used, price_at=since, used=what,
                    median_usd_per_hour=float(p.usd_per_hour))
    return info


def _price_note(prices: list[Price], now: dt.datetime | None) -> tuple[list[dict], str]:
    info = [_price_info(p, now) for p in prices]
    stale = [i for i in info if i["stale"]]
    note = ""
    if stale:
        oldest = min(i["as_of"] for i in stale)[:10]
        note = (f" Prices used are stale (oldest as of {oldest}): refresh prices before "
                "acting on this figure.")
    return info, note


def _finish(r: rec.Recommendation, prices: list[Price], now: dt.datetime | None,
            carbon: str = "") -> dict:
    info, note = _price_note(prices, now)
    r.reasoning += note
    out = asdict(r)
    out["carbon_source"] = carbon
    out["prices"] = info
    out["prices_stale"] = any(i["stale"] for i in info)
    return out


def _commit_prices(region: str, itype: str) -> list[Price]:
    """Reserved and savings-plan rates; a product-page rate of unstated payment option is
    dropped once the catalog has exact rates for that term (a refresh supersedes it)."""
    rows = list(Price.objects.filter(
        provider="aws", region=region, instance_type=itype,
        option__in=[PriceOption.RESERVED, PriceOption.SAVINGS_PLAN]))
    exact = {(p.option, p.term_years) for p in rows if p.payment != Payment.UNSPECIFIED}
    return [p for p in rows
            if p.payment != Payment.UNSPECIFIED or (p.option, p.term_years) not in exact]


def measured_days(tu: TeamUsage, hosts: list[Host]) -> int:
    """Whole days from the first hour these hosts reported in the window to its end."""
    ids = {h.id for h in hosts}
    first = min((b for u in tu.usage.values() if u.host_id in ids
                 and (b := u.first_hour()) is not None), default=None)
    return 0 if first is None else int((tu.end - first) / dt.timedelta(days=1))


def measured_hours(tu: TeamUsage, hosts: list[Host]) -> int:
    """Whole hours of the window these hosts could have reported in: from the earliest's
    enrollment (or the window's start) to its end, and never less than from their first
    report. The history a monthly projection rests on: hours they were enrolled but did not
    run count as not running (0 when they never reported)."""
    ids = {h.id for h in hosts}
    first = min((b for u in tu.usage.values() if u.host_id in ids
                 and (b := u.first_hour()) is not None), default=None)
    if first is None:
        return 0
    enrolled = min((h.created_at for h in hosts if h.created_at is not None), default=None)
    if enrolled is not None:
        first = min(first, max(tu.start, windows.floor_hour(enrolled)))
    return int((tu.end - first) / dt.timedelta(hours=1))


def to_month(tu: TeamUsage, hosts: list[Host]) -> float:
    """Factor from what these hosts did in the basis window to a month: a month's hours over
    the hours they were measured (a host enrolled 10 days ago is projected from those 10
    days, not diluted over 30)."""
    hours = measured_hours(tu, hosts)
    return HOURS_PER_MONTH / hours if hours else 0.0


def _measured_note(tu: TeamUsage, hosts: list[Host]) -> str:
    days = measured_hours(tu, hosts) / 24
    if days >= BASIS_DAYS:
        return (f" Monthly figures are based on the last {BASIS_DAYS} days measured, "
                "whatever the lookback.")
    return (f" Monthly figures are based on only {days:.1f} days measured, scaled to a month: "
            "they firm up as history grows.")


def savings_basis(tu: TeamUsage, now: dt.datetime | None,
                  idle_threshold_pct: float, basis: TeamUsage | None = None) -> TeamUsage:
    """The usage monthly savings are projected from: the latest BASIS_DAYS (the page's own
    usage when its lookback is exactly that, or the caller's `basis`)."""
    if basis is not None:
        return basis
    if tu.lookback_days == BASIS_DAYS:
        return tu
    return team_usage(tu.team, BASIS_DAYS, now, idle_threshold_pct)


def _commit_options(od: Price, commits: list[Price]) -> tuple[list[Price], list[str]]:
    """Commitment rates that may be compared with this on-demand price, and why others were
    left out: a rate older than the on-demand price (a price list from before a price cut) or
    one no cheaper than on-demand is never offered as a saving."""
    kept, left_out = [], []
    for p in commits:
        if p.as_of.date() < od.as_of.date():
            left_out.append(f"{p.label} (as of {p.as_of:%Y-%m-%d}, older than the on-demand "
                            f"price of {od.as_of:%Y-%m-%d})")
        elif p.usd_per_hour >= od.usd_per_hour:
            left_out.append(f"{p.label} (${p.usd_per_hour:.4f}/h, not below on-demand)")
        else:
            kept.append(p)
    return kept, left_out


def _commitments(tu: TeamUsage, od_rows: list[HostCost], now) -> list[dict]:
    groups: dict[tuple[str, str], list[HostCost]] = defaultdict(list)
    for r in od_rows:
        groups[(r.host.region, r.host.instance_type)].append(r)
    out = []
    for (region, itype), rows in sorted(groups.items()):
        od = rows[0].price.price
        subject = f"{itype} in {region}"
        counts = tu.hourly_counts([r.host for r in rows])
        if not any(counts):
            continue
        days = measured_days(tu, [r.host for r in rows])
        if days < MIN_COMMIT_DAYS:
            # A week of steady use says nothing about the next three years: no commitment is
            # sized on less than MIN_COMMIT_DAYS of history, whatever the lookback shows.
            r = rec.Recommendation(
                "no_commitment", subject, f"Not enough history to size a commitment for "
                f"{subject}", 0.0, 0.0, "low", 0.0, 0.0,
                f"{plural(days, 'day')} measured; commitments need {MIN_COMMIT_DAYS}. Choose a "
                f"{MIN_COMMIT_DAYS}-day or longer lookback once that much usage is measured.",
                detail={"measured_days": days, "needed_days": MIN_COMMIT_DAYS})
            out.append(_finish(r, [od], now))
            continue
        commits, left_out = _commit_options(od, _commit_prices(region, itype))
        options = [rec.CommitOption(p.label, float(p.usd_per_hour), p.term_years or 1)
                   for p in commits]
        r = rec.commitment(subject, counts, float(od.usd_per_hour), options)
        if left_out:
            r.reasoning += " Left out: " + "; ".join(left_out) + "."
            r.detail = {**r.detail, "left_out": left_out}
        r.detail = {**r.detail, "measured_days": days}
        out.append(_finish(r, [od, *commits], now))
    return out


def _gpu_shares(tu: TeamUsage) -> tuple[dict[int, dict[int, float]], dict[int, set[str]]]:
    """Per workload: its share of each host, as the host's GPUs it runs on over the host's GPU
    count, each GPU split evenly among the workloads that claim it, so that the workloads on
    one host never claim more than the whole host between them. Also which workloads are on
    each host."""
    gpu_host = {g.id: h.id for h in tu.hosts for g in h.gpus.all()}
    gpu_count = {r.host.id: r.gpu_count for r in tu.rows}
    claims: dict[int, list] = defaultdict(list)
    for w in tu.team.workloads.all():
        for gpu_id in w.gpu_queryset().values_list("id", flat=True):
            claims[gpu_id].append(w)
    shares: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    on_host: dict[int, set[str]] = defaultdict(set)
    for gpu_id, ws in claims.items():
        host_id = gpu_host.get(gpu_id)
        if host_id is None or not gpu_count.get(host_id):
            continue
        for w in ws:
            shares[w.id][host_id] += 1 / len(ws) / gpu_count[host_id]
            on_host[host_id].add(w.name)
    return shares, on_host


def _spot(tu: TeamUsage, pue, intensity, now, lookups: Lookups | None = None) -> list[dict]:
    """Spot per workload, sized by the workload's share of each host. Spot is bought per
    machine, so a workload sharing a host is told who else would move with it."""
    out = []
    shares, on_host = _gpu_shares(tu)
    for w in tu.team.workloads.all():
        traits = rec.WorkloadTraits(w.name, w.kind, w.interruptible, w.checkpoint_interval_min,
                                    w.latency_critical)
        share = shares.get(w.id, {})
        # A catalog on-demand rate to compare spot with: an on-premises host left at the
        # default purchase option is priced from its hardware (no catalog price behind it).
        rows = [r for r in tu.rows if share.get(r.host.id) and r.price is not None
                and r.price.price is not None
                and r.host.purchase_option == PurchaseOption.ON_DEMAND]
        groups: dict[tuple[str, str], list[HostCost]] = defaultdict(list)
        for r in rows:
            groups[(r.host.region, r.host.instance_type)].append(r)
        for (region, itype), hosts in sorted(groups.items()):
            od = hosts[0].price.price
            spot = find_price(hosts[0].host.provider or "aws", region, itype, PriceOption.SPOT)
            p, i, carbon = carbon_factors(hosts[0].host, pue, intensity, lookups)
            month = to_month(tu, [h.host for h in hosts])
            hours = sum(h.running_hours * share[h.host.id] for h in hosts) * month
            it_kwh = sum(h.energy_kwh * share[h.host.id] for h in hosts) * month
            spot_usd, spot_at, spot_what = spot_used(spot) if spot else (None, "", "")
            r = rec.spot_fit(traits, float(od.usd_per_hour), spot_usd,
                             spot.interruption_band if spot else "", hours, it_kwh, i, pue=p)
            if r is None:
                continue
            if spot is not None and r.kind == "spot":
                r.reasoning += (f" Spot at ${spot_usd:.4f}/h: the {spot_what} price, in force "
                                f"since {spot_at[:16].replace('T', ' ')} UTC.")
            if len(groups) > 1:
                r.subject = f"{w.name} on {itype} in {region}"
            _note_sharing(r, w.name, hosts, share, on_host)
            r.reasoning += _measured_note(tu, [h.host for h in hosts])
            r.detail = {**r.detail, "basis_days": measured_hours(tu, [h.host for h in hosts]) / 24}
            out.append(_finish(r, [od, *([spot] if spot else [])], now, carbon))
    return out


def _note_sharing(r: rec.Recommendation, name: str, hosts: list[HostCost],
                  share: dict[int, float], on_host: dict[int, set[str]]) -> None:
    others = sorted({o for h in hosts for o in on_host.get(h.host.id, ()) if o != name})
    instance_hours = sum(h.running_hours for h in hosts)
    gpu_share = (sum(h.running_hours * share[h.host.id] for h in hosts) / instance_hours
                 if instance_hours else 0.0)
    r.detail = {**r.detail, "gpu_share": gpu_share, "shared_with": others}
    if others:
        shared = ", ".join(h.host.name for h in hosts if on_host.get(h.host.id, set()) - {name})
        r.reasoning += (
            f" {name} shares {shared} with {', '.join(others)}: figures are {name}'s share "
            f"({gpu_share:.0%} of the GPU-hours), and the purchase option is the machine's, so "
            "it changes for every workload on it or for none.")


def _idle_streak(gpus: list[GpuUsage], end: dt.datetime, hours: int, threshold: float
                 ) -> tuple[list[GpuUsage], float]:
    """GPUs that reported in each of the last `hours` hours and were under the idle threshold
    in at least IDLE_SHARE of those minutes, and their combined average draw in kW. (The
    threshold itself was applied minute by minute when the usage was collected.)"""
    buckets = [end - dt.timedelta(hours=h + 1) for h in range(hours)]
    idle = [g for g in gpus if all(b in g.latest().minutes and b in g.latest().hours
                                   for b in buckets)
            and (g.latest().idle_share(buckets) or 0.0) >= IDLE_SHARE]
    kw = sum(g.latest().hours[b][1] for g in idle for b in buckets) / J_PER_KWH / hours
    return idle, kw


def _host_checks(tu: TeamUsage, pue, intensity, threshold, now,
                 lookups: Lookups | None = None) -> list[dict]:
    """Idle and oversized hosts. Each host gets at most one of: stop (all GPUs idle), rightsize
    (a smaller instance fits), or a place in its group's consolidation, so one host's saving is
    never counted twice and never exceeds what the host costs."""
    out = []
    by_host: dict[int, list[GpuUsage]] = defaultdict(list)
    for u in tu.usage.values():
        by_host[u.host_id].append(u)
    groups: dict[tuple, list[tuple[HostCost, rec.HostLoad]]] = defaultdict(list)
    for r in tu.rows:
        if r.price is None:
            continue
        p, i, carbon = carbon_factors(r.host, pue, intensity, lookups)
        gpus = by_host.get(r.host.id, [])
        hours_per_month = r.running_hours * to_month(tu, [r.host])
        note = _measured_note(tu, [r.host])
        used_prices = [r.price.price] if r.price.price else []
        idle, kw = ([], 0.0)
        if tu.window_hours >= IDLE_HOURS:
            idle, kw = _idle_streak(gpus, tu.end, IDLE_HOURS, threshold)
        if idle and len(idle) >= r.gpu_count:
            found_stop = rec.stop_idle(r.host.name, r.price.option, r.price.usd_per_hour,
                                       r.gpu_count, IDLE_HOURS, kw, p, i, hours_per_month)
            found_stop.reasoning += note
            out.append(_finish(found_stop, used_prices, now, carbon))
            continue
        found = _rightsize(r, gpus, threshold, hours_per_month, p, i, lookups)
        if found is not None:
            found[0].reasoning += note
            out.append(_finish(found[0], [*used_prices, found[1]], now, carbon))
            continue
        if idle:
            key = (r.host.provider or "aws", r.host.region, r.host.instance_type, r.price.option)
            groups[key].append((r, rec.HostLoad(r.host.name, r.gpu_count, len(idle), kw,
                                                r.price.usd_per_hour, hours_per_month)))
    for (_, region, itype, option), members in sorted(groups.items()):
        first = members[0][0]
        p, i, carbon = carbon_factors(first.host, pue, intensity, lookups)
        subject = first.host.name if len(members) == 1 else f"{itype} in {region}"
        found = rec.consolidate(subject, option, [m for _, m in members], p, i)
        if found is not None:
            found.reasoning += _measured_note(tu, [r.host for r, _ in members])
            prices = list({r.price.price.pk: r.price.price for r, _ in members
                           if r.price.price}.values())
            out.append(_finish(found, prices, now, carbon))
    return out


def _rightsize(r: HostCost, gpus: list[GpuUsage], threshold: float, hours_per_month: float,
               pue: float, intensity: float | None, lookups: Lookups | None = None
               ) -> tuple[rec.Recommendation, Price] | None:
    if r.host.purchase_option != PurchaseOption.ON_DEMAND or not gpus:
        return None
    lookups = lookups or Lookups(r.host.team_id, [r.host])
    current_type = lookups.instance_type(r.host.provider or "aws", r.host.instance_type)
    if current_type is None:
        return None
    # In use: busy (at or over the threshold) in more than 1 - IDLE_SHARE of its minutes.
    used = [g for g in gpus if g.idle_share() is not None and g.idle_share() < IDLE_SHARE]
    mems = [m for g in gpus if (m := g.mem_max_mib()) is not None]
    unused = [g for g in gpus if g not in used]
    unused_kw = sum(g.energy_kwh / g.hour_count() for g in unused if g.hour_count())
    offers = lookups.offers(r.host.region)
    current = rec.InstanceOffer(current_type.name, current_type.gpu_model,
                                current_type.gpu_count, current_type.gpu_memory_gib,
                                r.price.usd_per_hour)
    found = rec.rightsize(r.host.name, current, len(used), max(mems) / 1024 if mems else None,
                          [o for o, _ in offers], hours_per_month, unused_kw, pue, intensity)
    if found is None:
        return None
    return found, next(price for o, price in offers if o.name == found.detail["to"])


def _offers(region: str) -> list[tuple[rec.InstanceOffer, Price]]:
    types = {t.name: t for t in InstanceType.objects.filter(provider="aws")}
    out = []
    for p in Price.objects.filter(provider="aws", region=region, option=PriceOption.ON_DEMAND):
        t = types.get(p.instance_type)
        if t is not None:
            out.append((rec.InstanceOffer(t.name, t.gpu_model, t.gpu_count, t.gpu_memory_gib,
                                          float(p.usd_per_hour)), p))
    return out


def team_recommendations(team: Team, lookback_days: int, now: dt.datetime | None = None, *,
                         pue: float | None = None, intensity_g_per_kwh: float | None = None,
                         idle_threshold_pct: float = IDLE_UTIL_PCT,
                         usage: TeamUsage | None = None, basis: TeamUsage | None = None
                         ) -> dict:
    """`usage` (the lookback's) and `basis` (the latest BASIS_DAYS) default to
    month_cost.team_usage's (summed at the standard threshold, per hour at another); a caller
    that already read a window passes it."""
    tu = usage or team_usage(team, lookback_days, now, idle_threshold_pct)
    od_rows = [r for r in tu.rows if r.price is not None and r.price.price is not None
               and r.host.purchase_option == PurchaseOption.ON_DEMAND]
    basis = savings_basis(tu, now, idle_threshold_pct, basis)
    lookups = Lookups(team.id, basis.hosts)
    recs = (_commitments(tu, od_rows, now) + _spot(basis, pue, intensity_g_per_kwh, now, lookups)
            + _host_checks(basis, pue, intensity_g_per_kwh, idle_threshold_pct, now, lookups))
    recs.sort(key=lambda r: (-r["monthly_usd_saved"], r["kind"], r["subject"]))
    return {
        "team": team.slug,
        "lookback_days": lookback_days,
        "start": tu.start.isoformat(),
        "end": tu.end.isoformat(),
        "window_text": windows.lookback(tu.lookback_days, tu.end).text,
        "method": "estimate from measured GPU-hour rollups and catalog prices",
        # Commitments use the lookback (and need 30 days of it); the other savings always use
        # the latest BASIS_DAYS, so they do not swing with the lookback.
        "savings_basis": {"days": BASIS_DAYS, "start": basis.start.isoformat(),
                          "end": basis.end.isoformat()},
        # Each recommendation carries the factors it was computed with; these are all of them.
        "carbon_source": "; ".join(dict.fromkeys(r["carbon_source"] for r in recs
                                                 if r["carbon_source"])),
        "recommendations": recs,
        "problems": [{"host": r.host.name, "code": r.problem.code, "message": r.problem.message}
                     for r in tu.rows if r.problem is not None],
    }
