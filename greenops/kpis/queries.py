"""Read side: KPIs for any range and time series, from KpiRollup rows only."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from greenops.errors import invalid
from greenops.kpis import metrics
from greenops.kpis.models import KpiRollup, Period
from greenops.teams.models import Team
from greenops.workloads.models import Workload

# Ranges offered by the KPI pages; each compares with the period of equal length before it.
RANGES: dict[str, tuple[str, dt.timedelta, str]] = {
    "day": ("Last 24 hours", dt.timedelta(days=1), Period.HOUR),
    "week": ("Last 7 days", dt.timedelta(days=7), Period.HOUR),
    "month": ("Last 30 days", dt.timedelta(days=30), Period.DAY),
    "quarter": ("Last 90 days", dt.timedelta(days=90), Period.DAY),
}


def window(range_key: str, now: dt.datetime | None = None) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) ending at the end of the current hour (or day, for day resolution)."""
    _, span, period = RANGES[range_key]
    now = (now or timezone.now()).astimezone(dt.UTC)
    end = now.replace(minute=0, second=0, microsecond=0) + dt.timedelta(hours=1)
    if period == Period.DAY:
        end = now.replace(hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=1)
    return end - span, end


MAX_CUSTOM_SPAN = dt.timedelta(days=400)


def _parse_time(value: str, field: str) -> dt.datetime:
    try:
        t = dt.datetime.fromisoformat(value)
    except ValueError:
        raise invalid(field, "must be an ISO 8601 date or time, e.g. 2026-11-01T00:00Z") from None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def custom_window(start: str, end: str) -> tuple[dt.datetime, dt.datetime]:
    if not start or not end:
        raise invalid("start" if not start else "end", "start and end go together")
    lo, hi = _parse_time(start, "start"), _parse_time(end, "end")
    if hi <= lo:
        raise invalid("end", "must be after start")
    if hi - lo > MAX_CUSTOM_SPAN:
        raise invalid("end", f"a window may span at most {MAX_CUSTOM_SPAN.days} days")
    return lo.astimezone(dt.UTC), hi.astimezone(dt.UTC)


def window_kpis(team: Team, workload: Workload | None, start: dt.datetime,
                end: dt.datetime) -> dict:
    """KPIs for any window, widened to the rollups' buckets (and saying so)."""
    period = Period.DAY if end - start > dt.timedelta(days=31) else Period.HOUR
    step = dt.timedelta(days=1) if period == Period.DAY else dt.timedelta(hours=1)
    floor = start.replace(minute=0, second=0, microsecond=0)
    if period == Period.DAY:
        floor = floor.replace(hour=0)
    ceil = floor
    while ceil < end:
        ceil += step
    return {"period": period, "requested": {"start": start.isoformat(), "end": end.isoformat()},
            "start": floor.isoformat(), "end": ceil.isoformat(),
            "current": kpis(team, workload, floor, ceil, period)}


def rows(team: Team, workload: Workload | None, period: str, start: dt.datetime,
         end: dt.datetime):
    qs = KpiRollup.objects.filter(team=team, period=period, bucket__gte=start, bucket__lt=end)
    return qs.filter(workload=workload) if workload else qs.filter(workload__isnull=True)


def kpis(team: Team, workload: Workload | None, start: dt.datetime, end: dt.datetime,
         period: str = Period.HOUR) -> dict:
    """Every KPI for a team (workload None) or a workload over [start, end)."""
    totals = metrics.merge(rows(team, workload, period, start, end))
    return metrics.derive(totals, _elapsed_s(start, end))


def _elapsed_s(start: dt.datetime, end: dt.datetime, now: dt.datetime | None = None) -> float:
    """Seconds of [start, end) that have already happened: a window that ends with the current,
    unfinished hour must not divide its counts by time that has not passed yet."""
    now = now or timezone.now()
    return max((min(end, now) - start).total_seconds(), 1.0)


# The previous period must have data in at least this share of the current period's buckets.
COMPARABLE_COVERAGE = 0.8

CARD_KEYS = ("energy_kwh", "facility_energy_kwh", "co2e_kg", "cost_usd", "gpu_util_pct",
             "requests", "throughput_per_s", "energy_per_inference_j",
             "co2e_per_1k_inferences_g", "latency_p99_ms")


def overview(team: Team, workload: Workload | None, range_key: str,
             now: dt.datetime | None = None) -> dict:
    """Current-period KPIs and their change against the previous period of equal length."""
    label, span, period = RANGES[range_key]
    start, end = window(range_key, now)
    current = kpis(team, workload, start, end, period)
    previous = kpis(team, workload, start - span, start, period)
    # A change against a period that was only partly measured (the fleet joined half-way
    # through it) is a measurement artefact, not a trend: compare only like with like.
    buckets_now = rows(team, workload, period, start, end).count()
    buckets_before = rows(team, workload, period, start - span, start).count()
    comparable = buckets_now > 0 and buckets_before >= COMPARABLE_COVERAGE * buckets_now
    changes = {k: metrics.change_pct(current.get(k), previous.get(k)) if comparable else None
               for k in CARD_KEYS}
    return {"range": range_key, "label": label, "period": period, "start": start.isoformat(),
            "end": end.isoformat(), "current": current, "previous": previous,
            "change_pct": changes, "comparable": comparable,
            "previous_partial": 0 < buckets_before < COMPARABLE_COVERAGE * buckets_now}


def series(team: Team, workload: Workload | None, range_key: str,
           now: dt.datetime | None = None) -> dict:
    """Per-bucket KPIs for charts."""
    _, _, period = RANGES[range_key]
    start, end = window(range_key, now)
    step = 3600 if period == Period.HOUR else 86400
    out: dict[str, list] = {k: [] for k in (
        "t", "requests", "energy_kwh", "energy_per_inference_j", "throughput_per_s",
        "latency_p99_ms", "latency_p50_ms", "co2e_kg")}
    simulated = False
    for r in rows(team, workload, period, start, end).order_by("bucket"):
        k = metrics.derive(metrics.merge([r]), _elapsed_s(
            r.bucket, r.bucket + dt.timedelta(seconds=step)))
        out["t"].append(r.bucket.isoformat())
        for key in list(out)[1:]:
            out[key].append(k[key])
        simulated = simulated or r.simulated
    return {"period": period, "simulated": simulated, **out}


def workload_table(team: Team, range_key: str, now: dt.datetime | None = None) -> list[dict]:
    _, _, period = RANGES[range_key]
    start, end = window(range_key, now)
    by_id: dict[int, list] = {}
    for r in KpiRollup.objects.filter(team=team, period=period, bucket__gte=start,
                                      bucket__lt=end, workload__isnull=False):
        by_id.setdefault(r.workload_id, []).append(r)
    out = []
    for w in Workload.objects.filter(team=team):
        k = metrics.derive(metrics.merge(by_id.get(w.id, [])), (end - start).total_seconds())
        out.append({"workload": w, **k})
    return out
