"""Read side: KPIs for any range and time series, from KpiRollup rows only."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db.models import Q

from greenops import windows
from greenops.kpis import metrics
from greenops.kpis.models import KpiRollup, Period  # noqa: F401 (Period: pages read it here)
from greenops.teams.models import Team
from greenops.telemetry.models import Host
from greenops.workloads.models import Workload

# Named ranges the KPI pages offer (greenops.windows owns them) and the rollup period that
# serves each; each compares with the period of equal length before it.
PERIOD: dict[str, str] = {
    # KPIs roll up hourly: "hour" is the current clock hour so far (the page says so), so
    # every team page offers the same five ranges.
    "hour": Period.HOUR,
    "day": Period.HOUR,
    "week": Period.HOUR,
    "month": Period.DAY,
    "quarter": Period.DAY,
}
RANGES = windows.ranges(*PERIOD)
STEP = {Period.HOUR: windows.HOUR, Period.DAY: windows.DAY}


def window(range_key: str, now: dt.datetime | None = None) -> windows.Window:
    """The figures' period (windows.period): whole finished hours to the start of this hour,
    the window the team home, the cost model and reports count too."""
    return windows.period(range_key, now)


def window_kpis(team: Team, workload: Workload | None, window: windows.Window) -> dict:
    """KPIs for any window, widened to whole hours (the rollups' buckets, and saying so)."""
    period = Period.DAY if window.span > dt.timedelta(days=31) else Period.HOUR
    wide = window.widened(windows.HOUR)
    wide = windows.Window(wide.start, wide.end, window.label, window.key, window.tz,
                          window.so_far)
    return {"period": period, "requested": {"start": window.start.isoformat(),
                                            "end": window.end.isoformat()},
            "start": wide.start.isoformat(), "end": wide.end.isoformat(),
            "window": wide.as_dict(),
            "current": kpis(team, workload, wide.start, wide.end, period,
                            rows_by_day(team, workload, wide.start, wide.end))}


def rows(team: Team, workload: Workload | None, period: str, start: dt.datetime,
         end: dt.datetime):
    qs = KpiRollup.objects.filter(team=team, period=period, bucket__gte=start, bucket__lt=end)
    return qs.filter(workload=workload) if workload else qs.filter(workload__isnull=True)


def rows_by_day(team: Team, workload: Workload | None, start: dt.datetime,
                end: dt.datetime) -> list[KpiRollup]:
    """The rows that cover the hour-aligned [start, end): each whole UTC day in it from its day
    row (rollup.rollup_day: the exact merge of its hours), the rest -- the hours before the
    first whole day and after the last, and any day whose day row is not written yet -- from
    hour rows. A month to date late in the month is ~30 day rows and a day's hours instead of
    up to 744 hour rows, each a model object to build on every team-home view."""
    first, last = windows.ceil(start, windows.DAY), windows.floor_day(end)
    if first >= last:
        return list(rows(team, workload, Period.HOUR, start, end))
    days = list(rows(team, workload, Period.DAY, first, last))
    hours = Q(bucket__lt=first) | Q(bucket__gte=last)
    have = {r.bucket for r in days}
    day = first
    while day < last:
        if day not in have:
            hours |= Q(bucket__gte=day, bucket__lt=day + windows.DAY)
        day += windows.DAY
    return days + list(rows(team, workload, Period.HOUR, start, end).filter(hours))


def kpis(team: Team, workload: Workload | None, start: dt.datetime, end: dt.datetime,
         period: str = Period.HOUR, rollups: list[KpiRollup] | None = None) -> dict:
    """Every KPI for a team (workload None) or a workload over [start, end); `rollups`: its
    rows when the caller read them already."""
    if rollups is None:
        rollups = list(rows(team, workload, period, start, end))
    totals = metrics.merge(rollups)
    # Rates divide by the seconds measured (in the rows); the period only says "of how long".
    return metrics.derive(totals, (end - start).total_seconds())


def workload_figures(workload: Workload, k: dict) -> dict:
    """A workload's KPIs with unknown, not zero, where none of its GPUs reported."""
    return metrics.without_gpu_data(k, workload.gpu_queryset().exists())


# The previous period must have data in at least this share of the current period's buckets.
COMPARABLE_COVERAGE = 0.8

CARD_KEYS = ("gpu_energy_kwh", "energy_kwh", "facility_energy_kwh", "co2e_kg", "cost_usd",
             "gpu_util_pct", "requests", "throughput_per_s", "energy_per_inference_j",
             "co2e_per_1k_inferences_g", "energy_per_token_j", "latency_p50_ms",
             "latency_p99_ms")


def overview(team: Team, workload: Workload | None, range_key: str,
             now: dt.datetime | None = None) -> dict:
    """Current-period KPIs and their change against the previous period of equal length."""
    return window_overview(team, workload, window(range_key, now), PERIOD[range_key])


def host_hours(team: Team, start: dt.datetime, end: dt.datetime,
               rollups: list[KpiRollup] | None = None) -> dict:
    """How much of a period was measured: the team's host-hours in [start, end) -- each hour in
    which a host existed (enrolled, not yet removed) -- and how many of them had a GPU sample.
    {"measured", "expected", "share" (None: no host existed), "text"}.

    Measured host-hours come from the team's KPI rows (KpiRollup.hosts_measured, counted when
    rollup.rollup_hour builds the hour), one per bucket: never from the GPU-hours themselves,
    which grow with the fleet. `rollups`: the team rows of [start, end) (rows_by_day) when the
    caller read them already."""
    expected = 0
    for created, removed in Host.objects.filter(team=team).values_list("created_at",
                                                                       "removed_at"):
        lo = max(start, windows.floor_hour(created)) if created else start
        hi = min(end, removed) if removed else end
        if hi > lo:
            expected += windows.Window(lo, hi).bucket_count(windows.HOUR)
    if rollups is None:
        rollups = rows_by_day(team, None, start, end)
    measured = sum(r.hosts_measured or 0 for r in rollups)
    # Hours measured outside a host's enrollment (a replayed spool, rows written before the
    # host row): measured, so they count as hours of the period too.
    expected += sum(r.hosts_unenrolled or 0 for r in rollups)
    share = measured / expected if expected else None
    text = (f"{share * 100:.0f} % of host-hours measured ({measured:,} of {expected:,})"
            if share is not None else "no host in this period")
    return {"measured": measured, "expected": expected, "share": share, "text": text}


def coverage_flag(now_cov: dict, before_cov: dict) -> str:
    """Why a change between two periods is not shown as a bare percentage: either side measured
    under settings.GREENOPS_COMPARE_MIN_COVERAGE of its host-hours. "" when both are enough."""
    least = settings.GREENOPS_COMPARE_MIN_COVERAGE
    if now_cov["share"] is None and before_cov["share"] is None:
        return ""  # no host on either side (inference counts only): nothing to weigh
    for name, c in (("this period", now_cov), ("the previous period", before_cov)):
        if c["share"] is None or c["share"] < least:
            if c["share"] is None:
                return f"change not shown: {name} had no host to measure"
            return (f"change not shown: {name} measured {c['share'] * 100:.0f} % of its "
                    f"host-hours (under {least * 100:.0f} %)")
    return ""


def window_overview(team: Team, workload: Workload | None, w: windows.Window,
                    period: str = Period.HOUR) -> dict:
    """KPIs over the whole-hour window `w` (a named period, a calendar month so far) and their
    change against the window of equal length before it. `period` only picks the chart's
    buckets: the figures read whole UTC days from day rows and the hours at the edges from hour
    rows, exactly the hours of `w` (rows_by_day)."""
    start, end, span = w.start, w.end, w.span
    now_rows = rows_by_day(team, workload, start, end)
    before_rows = rows_by_day(team, workload, start - span, start)
    current = kpis(team, workload, start, end, period, now_rows)
    previous = kpis(team, workload, start - span, start, period, before_rows)
    if workload is not None:
        current, previous = workload_figures(workload, current), workload_figures(workload,
                                                                                  previous)
    # A change against a period that was only partly measured (the fleet joined half-way
    # through it) is a measurement artefact, not a trend: compare only like with like.
    buckets_now = rows(team, workload, Period.HOUR, start, end).count()
    buckets_before = rows(team, workload, Period.HOUR, start - span, start).count()
    # The newest hour is rewritten by rollup.run every beat tick while late data arrives
    # (settings CELERY_BEAT_SCHEDULE "kpi-rollups"), so the page says how fresh it is.
    as_of = max((r.computed_at for r in now_rows), default=None)
    # One hour against the hour before it says little: no trend shown.
    clock_hour = w.span <= windows.HOUR
    comparable = (not clock_hour and buckets_now > 0
                  and buckets_before >= COMPARABLE_COVERAGE * buckets_now)
    if workload is None:  # the team rows already read hold the measured host-hours
        cov_now = host_hours(team, start, end, now_rows)
        cov_before = host_hours(team, start - span, start, before_rows)
    else:
        cov_now, cov_before = host_hours(team, start, end), host_hours(team, start - span, start)
    flag = coverage_flag(cov_now, cov_before) if not clock_hour else ""
    comparable = comparable and not flag
    changes = {k: metrics.change_pct(current.get(k), previous.get(k)) if comparable else None
               for k in CARD_KEYS}
    return {"range": w.key, "label": w.label, "coverage": cov_now,
            "previous_coverage": cov_before, "coverage_flag": flag, "period": period,
            "start": start.isoformat(),
            "end": end.isoformat(), "window": w.as_dict(), "window_text": w.text,
            "current": current, "previous": previous,
            "change_pct": changes, "comparable": comparable, "clock_hour": clock_hour,
            "as_of": as_of.astimezone(dt.UTC).isoformat() if as_of else None,
            "previous_partial": 0 < buckets_before < COMPARABLE_COVERAGE * buckets_now}


def month_window(team: Team, value: str, now: dt.datetime | None = None,
                 field: str = "month") -> windows.Window:
    """"2026-11" -> that calendar month in the team's time zone, cut at the start of the
    current hour while it runs (the window a report of that month covers)."""
    return windows.so_far(windows.parse_month(value, team.time_zone or "UTC", field), now,
                          field)


def series(team: Team, workload: Workload | None, range_key: str,
           now: dt.datetime | None = None, w: windows.Window | None = None) -> dict:
    """Per-bucket KPIs for charts: the rollup buckets that overlap the figures' window."""
    period = PERIOD.get(range_key, Period.HOUR)
    w = w or window(range_key, now)
    wide = w.widened(STEP[period])
    start, end = wide.start, wide.end
    step = 3600 if period == Period.HOUR else 86400
    out: dict[str, list] = {k: [] for k in (
        "t", "requests", "energy_kwh", "energy_per_inference_j", "throughput_per_s",
        "latency_p99_ms", "latency_p50_ms", "co2e_kg")}
    simulated = False
    for r in rows(team, workload, period, start, end).order_by("bucket"):
        k = metrics.derive(metrics.merge([r]), step)
        out["t"].append(r.bucket.isoformat())
        for key in list(out)[1:]:
            out[key].append(k[key])
        simulated = simulated or r.simulated
    return {"period": period, "simulated": simulated, **out}


def workload_table(team: Team, range_key: str, now: dt.datetime | None = None,
                   w: windows.Window | None = None) -> list[dict]:
    """Each workload's KPIs over the figures' window (the same hours as the team's cards)."""
    w = w or window(range_key, now)
    out = []
    for wl in Workload.objects.filter(team=team):
        k = kpis(team, wl, w.start, w.end, rollups=rows_by_day(team, wl, w.start, w.end))
        out.append({"workload": wl, **workload_figures(wl, k)})
    return out
