"""The hourly and daily KPI rollups, rebuilt incrementally and idempotently.

Each run recomputes whole buckets from their sources (GPU rollups, host CPU/RAM hours, raw
inference windows) and overwrites them, so running twice changes nothing. Which buckets:
  - the last `lookback_h` hours (telemetry for recent hours is still arriving), reaching back
    `lookback_h` - 1 hours before the hour in which the previous run started (so a pause in
    beat, or a batch stored just after a run, loses no hour: see telemetry/late.py), and
  - every hour that received inference windows since the previous run (late senders), found
    through a cursor on InferenceBatch.received_at;
  - every hour whose GPU or CPU/RAM telemetry arrived after the lookback had passed it (an agent
    replaying its spool after an outage), which ingest marks as telemetry.LateHour rows;
then every day that contains one of those hours is re-merged from its hour rows, and training
jobs that overlap a late hour are accounted again.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from django.core.cache import cache
from django.db import transaction
from django.db.models.functions import TruncHour
from django.utils import timezone

from greenops.kpis import job_accounting, metrics
from greenops.kpis.measure import Factors, add_inference, cached_factors, measure_gpus
from greenops.kpis.models import InferenceBatch, InferenceWindow, KpiRollup, Period, RollupCursor
from greenops.teams.models import Team
from greenops.telemetry import late
from greenops.telemetry.models import Gpu, GpuHour, LateHour
from greenops.windows import floor_day, floor_hour
from greenops.workloads.models import Workload, WorkloadKind

HOUR = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)
CURSOR = "inference"
RUN_CURSOR = "run"  # when the last completed run started
OVERLAP = dt.timedelta(minutes=5)


def _empty(t: metrics.Totals) -> bool:
    # A committed host costs money in an hour it did not run: that hour is not empty.
    return not (t.requests or t.gpu_minutes or t.hosts_measured or t.gpu_energy_j
                or t.cpu_ram_energy_j or t.latency_buckets or t.latency_n or t.cost_usd is None
                or t.cost_usd)


# A counter per team that every write of its KPI rollups bumps once committed, so figures
# computed from those rows can be kept until it moves (dashboards.headline.page_figures). After
# the commit, never before: a reader in between would store the old rows' figures under the
# new value and keep them.
GENERATION_KEY = "kpis:generation"


def generation_key(team_id: int) -> str:
    return f"{GENERATION_KEY}:{team_id}"


def generation(team_id: int) -> int:
    return cache.get(generation_key(team_id), 0)


def _changed(team_id: int) -> None:
    def bump() -> None:
        try:
            cache.incr(generation_key(team_id))
        except ValueError:  # not set yet (or evicted)
            cache.set(generation_key(team_id), 1, None)
    # robust: the rows are committed whatever the cache says; a cache that is down (its
    # entries with it) must not fail the rollup run, and the next write moves the counter.
    transaction.on_commit(bump, robust=True)


def _save(team: Team, workload: Workload | None, period: str, bucket: dt.datetime,
          t: metrics.Totals) -> None:
    """The one writer of KPI rollup rows."""
    key = {"team": team, "workload": workload, "period": period, "bucket": bucket}
    if _empty(t):
        if KpiRollup.objects.filter(**key).delete()[0]:
            _changed(team.id)
        return
    KpiRollup.objects.update_or_create(**key, defaults={**t.as_row(),
                                                        "computed_at": timezone.now()})
    _changed(team.id)


def hosts_measured(team: Team, gpus: list[Gpu], hour: dt.datetime) -> tuple[int, int]:
    """(the team's hosts with a GPU sample in `hour`, of them those measured outside their
    enrollment: `hour` before the one the host was created in, or from its removal on). A
    host counts once however many of its GPUs reported; `gpus`: the team's, with their hosts."""
    measured = set(GpuHour.objects.filter(gpu__host__team=team, bucket=hour, samples__gt=0)
                   .values_list("gpu__host_id", flat=True).distinct())
    hosts = {g.host_id: g.host for g in gpus}
    outside = sum(1 for h in map(hosts.get, measured) if h is not None and (
        (h.created_at is not None and hour < floor_hour(h.created_at))
        or (h.removed_at is not None and hour >= h.removed_at)))
    return len(measured), outside


def rollup_hour(team: Team, hour: dt.datetime, factors: Factors | None = None) -> None:
    """Rebuild one hour's rows: one per workload, plus the team total (workload null)."""
    end = hour + HOUR
    workloads = list(Workload.objects.filter(team=team))
    with transaction.atomic():
        for w in workloads:
            t = measure_gpus(list(w.gpu_queryset().select_related("host")), hour, end, factors)
            add_inference(t, [w.id], hour, end)
            _save(team, w, Period.HOUR, hour, t)
        # The team total counts each GPU once, however many workloads share it.
        team_gpus = list(Gpu.objects.filter(host__team=team).select_related("host"))
        t = measure_gpus(team_gpus, hour, end, factors)
        serving = [w for w in workloads if w.kind != WorkloadKind.TRAINING]
        add_inference(t, [w.id for w in serving], hour, end)
        # Per-inference figures of the team: the GPUs of the workloads whose inferences are
        # counted, each GPU once; training GPUs' energy is not divided by inferences.
        inference_gpus = list({g.id: g for w in serving
                               for g in w.gpu_queryset().select_related("host")}.values())
        served = measure_gpus(inference_gpus, hour, end, factors)
        t.inference_energy_j, t.inference_co2e_g = served.energy_j, served.co2e_g
        t.inference_cost_usd = served.cost_usd
        t.hosts_measured, t.hosts_unenrolled = hosts_measured(team, team_gpus, hour)
        _save(team, None, Period.HOUR, hour, t)


def rollup_day(team: Team, day: dt.datetime) -> None:
    """A day row is the exact merge of its hour rows."""
    hours = KpiRollup.objects.filter(team=team, period=Period.HOUR, bucket__gte=day,
                                     bucket__lt=day + DAY)
    by_workload: dict[int | None, list] = defaultdict(list)
    for row in hours:
        by_workload[row.workload_id].append(row)
    with transaction.atomic():
        stale = KpiRollup.objects.filter(team=team, period=Period.DAY, bucket=day)
        keep = [k for k in by_workload if k is not None]
        gone = stale.filter(workload__isnull=False).exclude(workload_id__in=keep).delete()[0]
        if None not in by_workload:
            gone += stale.filter(workload__isnull=True).delete()[0]
        if gone:
            _changed(team.id)
        for workload_id, rows in by_workload.items():
            workload = rows[0].workload if workload_id is not None else None
            _save(team, workload, Period.DAY, day, metrics.merge(rows))


def rebuild(team: Team, start: dt.datetime, end: dt.datetime,
            factors: Factors | None = None) -> int:
    """Recompute every hour in [start, end) and the days they touch. Returns hours done."""
    factors = factors or cached_factors()
    hour, n, days = floor_hour(start), 0, set()
    while hour < end:
        rollup_hour(team, hour, factors)
        days.add(floor_day(hour))
        hour += HOUR
        n += 1
    for day in sorted(days):
        rollup_day(team, day)
    return n


def _touched_hours(since: dt.datetime | None) -> tuple[dict[int, set], dt.datetime | None]:
    """({team_id: {hour}}, newest received_at) for inference windows received after `since`.

    Reads from OVERLAP before the cursor: a batch whose transaction commits late carries an
    earlier received_at, and recomputing an hour twice is harmless.
    """
    batches = InferenceBatch.objects.all()
    if since is not None:
        batches = batches.filter(received_at__gt=since - OVERLAP)
    newest = max(batches.values_list("received_at", flat=True), default=None)
    rows = (InferenceWindow.objects.filter(batch__in=batches)
            .annotate(h=TruncHour("end")).values_list("batch__team_id", "h").distinct())
    touched: dict[int, set] = defaultdict(set)
    for team_id, hour in rows:
        touched[team_id].add(hour)
    return touched, newest


def run(now: dt.datetime | None = None, lookback_h: int = late.LOOKBACK_HOURS,
        factors: Factors | None = None) -> dict:
    """One beat tick. Safe to run concurrently with ingest and to run twice."""
    now = now or timezone.now()
    factors = factors or cached_factors()
    cursor = RollupCursor.objects.filter(name=CURSOR).first()
    touched, newest = _touched_hours(cursor.position if cursor else None)
    late_rows = list(LateHour.objects.order_by("hour").values_list("id", "team_id", "hour")[:5000])
    for _, team_id, hour in late_rows:
        touched[team_id].add(hour)
    current = floor_hour(now)
    previous_run = RollupCursor.objects.filter(name=RUN_CURSOR).first()
    since = min(previous_run.position, now) if previous_run else now
    first = late.reach(since, lookback_h)
    recent = {first + HOUR * i for i in range(int((current - first) / HOUR) + 1)}
    active_teams = set(Gpu.objects.filter(host__team__isnull=False).values_list(
        "host__team_id", flat=True).distinct()) | set(touched)
    done = 0
    for team in Team.objects.filter(id__in=active_teams):
        hours = sorted(recent | touched.get(team.id, set()))
        for hour in hours:
            rollup_hour(team, hour, factors)
        for day in sorted({floor_day(h) for h in hours}):
            rollup_day(team, day)
        done += len(hours)
    if newest is not None and (cursor is None or newest > cursor.position):
        RollupCursor.objects.update_or_create(name=CURSOR, defaults={"position": newest})
    accounted = job_accounting.refresh_recent(now, now - first, factors)
    for _, team_id, hour in late_rows:
        accounted += job_accounting.refresh_overlapping(team_id, hour, hour + HOUR, now, factors)
    # Only now: a run that failed half-way leaves the marks for the next one.
    LateHour.objects.filter(id__in=[row[0] for row in late_rows]).delete()
    RollupCursor.objects.update_or_create(name=RUN_CURSOR, defaults={"position": now})
    return {"hours": done, "jobs": accounted, "late_hours": len(late_rows)}
