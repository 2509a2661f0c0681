"""Fleet rollups: each team's chart figures per closed display bucket, stored ahead of the page
views (telemetry.FleetBucket), so the team dashboard reads at most ~300 rows per range instead
of aggregating up to 1.4 M per-GPU rollup rows on every request
(greenops.telemetry.fleet.team_fleet_series reads them).

`fill` (beat: dashboards.tasks.fill_fleet_rollups, rollups queue) keeps, per team of more than
MAX_GPU_SERIES GPUs and per display step of the ranges the page offers (GRIDS), every closed
bucket of the last range span stored, computed by the same statement the live path runs
(fleet.bucket_figures) from the per-GPU rollups. It only reads what ingest already wrote: the
ingest path does no extra work. Which buckets a run recomputes:
- new buckets: closed since the previous run, and complete: ended GRACE before the run, or
  sooner when the data say so (complete_through: every GPU that reported within GRACE has a
  stored sample at or after the bucket's end, and no batch was overtaken by a later one of
  its host -- an agent ships its spool strictly in order, so nothing older is still to come);
- the lookback: every stored bucket from late.reach(previous run's start), the hours a batch
  may still change without being marked late (the KPI rollup's rule, greenops.telemetry.late);
- older buckets whose data changed anyway (a replayed spool, a worker that was down, a host
  deleted with its history): found by comparing each stored hour of the open UTC day with the
  hour rollups, and each stored closed day with the day rollups (samples, GPUs, sum of GPU ids:
  any batch adds samples), then recomputed at every step for that hour or day. No marks are
  read (the KPI rollup deletes telemetry.LateHour rows as it consumes them).
Open cells: each run also stores, for the grids whose display step spans several rollup steps
(the day's 5 minutes, the month's 3 hours), the open bucket's complete rollup steps summed per
GPU (FleetOpenCell), so that a view sums only the rollup rows since then instead of the whole
open bucket (at 10,000 GPUs up to 60,000 minute rows, read again by every view). They are
rewritten by every run, as the lookback's buckets are, so late data reach them at the next run.
Partition drops: buckets at minute steps are kept only for the last day (DROP minute partitions
are weeks older), hour and day rollups are never dropped, and a stored bucket is never
recomputed from a period retention removed: stored figures stay exact across drops.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass

import numpy as np
from django.db import connection, transaction
from django.utils import timezone

from greenops.chart_style import MAX_POINTS
from greenops.db_router import read_connection
from greenops.teams.models import Team
from greenops.telemetry import late, store
from greenops.telemetry.fleet import (
    ROLLUP_STEP_S,
    bucket_figures,
    display_step_s,
    team_open_cells_current_sql,
    team_open_cells_sql,
)
from greenops.telemetry.models import ROLLUPS, FleetBucket, FleetFill, FleetOpenCell, IngestBatch
from greenops.telemetry.queries import MAX_GPU_SERIES, RANGES, RESOLUTION, team_gpus
from greenops.windows import DAY, ceil, floor

log = logging.getLogger(__name__)

# A bucket is stored once it ended this long before the run: an agent sends every 10 s and a
# batch waits seconds in the ingest queue, so a minute after its end a bucket is complete (a
# later batch is caught by the lookback at the next runs). Every bucket after it is computed
# live on each page view -- for a 1,000-GPU fleet ~4 ms per minute of minute rollups -- so
# the grace is kept short.
GRACE = dt.timedelta(minutes=1)


# Per GPU its newest stored sample within (now - GRACE, now]: one index probe per GPU on the
# samples' (gpu_id, ts) key, in the one or two partitions the window touches.
_NEWEST_SQL = """
    SELECT min(newest.ts), count(newest.ts)
    FROM unnest(%(gpus)s::bigint[]) AS g(id) CROSS JOIN LATERAL (
        SELECT s.ts FROM telemetry_gpusample s WHERE s.gpu_id = g.id AND s.ts > %(since)s
            AND s.ts <= %(now)s ORDER BY s.ts DESC LIMIT 1) AS newest
"""
# A batch of the team's hosts still waiting while a batch its host sent after it is stored
# already (two workers took them): the stored one's samples are newer than the waiting one's.
# The inner scan reads the batches received since the waiting one (the received_at index).
_OVERTAKEN_SQL = """
    SELECT EXISTS (SELECT 1 FROM telemetry_ingestbatch p JOIN telemetry_host h ON h.id = p.host_id
        WHERE h.team_id = %(team)s AND p.status = %(pending)s AND EXISTS (
            SELECT 1 FROM telemetry_ingestbatch d WHERE d.received_at > p.received_at
                AND d.host_id = p.host_id AND d.status <> %(pending)s))
"""


def complete_through(team: Team, gpu_ids: list[int], now: dt.datetime) -> dt.datetime | None:
    """How far the team's data are complete at `now`, before GRACE has passed: the oldest of
    the newest stored samples of the GPUs that reported within GRACE (a watermark, as stream
    processors close windows). An agent ships its spool strictly in order and a batch is
    stored with its rollups in one statement, so a GPU with a stored sample at t has nothing
    older still to come: a batch waiting to be stored holds newer samples -- unless a batch its
    host sent later was stored first (two workers), and then the watermark says nothing. An
    outage's replay is late data, found by the lookback as without a watermark. None (GRACE
    alone decides) then, or when no GPU reported within GRACE."""
    with read_connection().cursor() as cursor:
        cursor.execute(_OVERTAKEN_SQL, {"team": team.id,
                                        "pending": IngestBatch.Status.PENDING.value})
        if cursor.fetchone()[0]:
            return None
        cursor.execute(_NEWEST_SQL, {"gpus": store.int_array(gpu_ids), "since": now - GRACE,
                                     "now": now})
        oldest_newest, reporting = cursor.fetchone()
    return oldest_newest if reporting else None


@dataclass(frozen=True)
class Grid:
    step_s: int
    resolution: str  # the rollup it is computed from
    keep: dt.timedelta  # how far back buckets are kept: the longest range drawn at this step

    @property
    def step(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.step_s)


def _grids() -> dict[int, Grid]:
    out: dict[int, Grid] = {}
    for key, (resolution, source_step) in RESOLUTION.items():
        span = RANGES[key].span
        step_s = display_step_s(span.total_seconds(), int(source_step.total_seconds()),
                                MAX_POINTS)
        keep = span + dt.timedelta(seconds=step_s)
        old = out.get(step_s)
        if old is not None and old.resolution != resolution:
            raise RuntimeError(f"two rollups for display step {step_s} s")
        out[step_s] = Grid(step_s, resolution, max(keep, old.keep) if old else keep)
    return out


GRIDS = _grids()  # today: 60 s and 300 s (minute), 3,600 s and 3 h (hour), 1 day (day)
# The grids whose buckets are exactly one hour and one day: their stored fingerprints are
# compared with the hour and day rollups to find late changes.
HOUR_GRID, DAY_GRID = GRIDS.get(3600), GRIDS.get(86400)


def _fingerprints(table: str, gpu_ids: list[int], start: dt.datetime,
                  end: dt.datetime) -> dict[dt.datetime, tuple[int, int, int]]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT bucket, sum(samples), count(*), sum(gpu_id) FROM {table} "
            "WHERE gpu_id = ANY(%s::bigint[]) AND bucket >= %s AND bucket < %s GROUP BY bucket",
            [store.int_array(gpu_ids), start, end])
        return {b: (int(n), int(g), int(s)) for b, n, g, s in cursor.fetchall()}


def changed_periods(team: Team, gpu_ids: list[int], fills: dict[int, FleetFill],
                    now: dt.datetime) -> list[tuple[dt.datetime, dt.datetime]]:
    """Hours of the open UTC day before the lookback, and closed days, whose rollups no longer
    match the stored buckets' fingerprints: late data the lookback does not reach."""
    out = []
    checks = []
    if DAY_GRID and DAY_GRID.step_s in fills:
        f = fills[DAY_GRID.step_s]
        checks.append(("telemetry_gpuday", DAY_GRID, f.start, f.until))
    if HOUR_GRID and HOUR_GRID.step_s in fills:
        f = fills[HOUR_GRID.step_s]
        lo = max(f.start, floor(now, DAY) - DAY)
        hi = min(f.until, late.reach(f.filled_at))
        if lo < hi:
            checks.append(("telemetry_gpuhour", HOUR_GRID, lo, hi))
    for table, grid, lo, hi in checks:
        rollups = _fingerprints(table, gpu_ids, lo, hi)
        stored = {b: (n, g, s) for b, n, g, s in FleetBucket.objects.filter(
            team=team, step_s=grid.step_s, bucket__gte=lo, bucket__lt=hi).values_list(
            "bucket", "samples", "n_gpus", "gpu_id_sum")}
        for bucket in sorted(set(rollups) | set(stored)):
            if rollups.get(bucket, (0, 0, 0)) != stored.get(bucket, (0, 0, 0)):
                out.append((bucket, bucket + grid.step))
    return out


# For the minute grids' lookback: per hour from `lo`, the samples the hour rollups hold for the
# team's GPUs ('h'), and those the minute rollups hold after the stored buckets' end in the
# hour that end falls in ('m': only the minutes since the previous run, which it reads for
# its new buckets anyway). One statement, so both come from one snapshot of what ingest stored
# (it writes a batch's minute and hour rollups in one statement).
_HOUR_SAMPLES_SQL = """
    SELECT 'h', bucket, sum(samples) FROM telemetry_gpuhour
        WHERE gpu_id = ANY(%(gpus)s::bigint[]) AND bucket >= %(lo)s AND bucket < %(hi)s
        GROUP BY bucket
    UNION ALL
    SELECT 'm', date_trunc('hour', bucket), sum(samples) FROM telemetry_gpuminute
        WHERE gpu_id = ANY(%(gpus)s::bigint[]) AND bucket >= %(until)s AND bucket < %(hi)s
        GROUP BY 2
"""


def changed_hours(team: Team, grid: Grid, gpu_ids: list[int], lo: dt.datetime,
                  until: dt.datetime) -> list[tuple[dt.datetime, dt.datetime]]:
    """The whole hours in [lo, until) (lo hour-aligned) whose stored buckets at a minute grid
    no longer hold what the rollups do: a batch stored after them (any batch adds samples), a
    GPU added with history, a host deleted with it. Compared through the hour rollups -- the
    samples of the hour's stored buckets, plus those of its minutes after `until`, against
    the hour's rollups -- instead of recomputing every bucket of the lookback from the per-GPU
    minute rows each run (issue 35: at 10,000 GPUs that re-read ~2 M minute rows a minute)."""
    hi = ceil(until, dt.timedelta(hours=1))
    if lo >= hi:
        return []
    rollup: dict[dt.datetime, int] = {}
    tail: dict[dt.datetime, int] = {}
    with connection.cursor() as cursor:
        cursor.execute(_HOUR_SAMPLES_SQL, {"gpus": store.int_array(gpu_ids), "lo": lo,
                                           "hi": hi, "until": until})
        for kind, hour, n in cursor.fetchall():
            (rollup if kind == "h" else tail)[hour] = int(n)
    stored: dict[dt.datetime, int] = {}
    for bucket, n in FleetBucket.objects.filter(
            team=team, step_s=grid.step_s, bucket__gte=lo, bucket__lt=until).values_list(
            "bucket", "samples"):
        hour = floor(bucket, dt.timedelta(hours=1))
        stored[hour] = stored.get(hour, 0) + n
    out = []
    hour = lo
    while hour < hi:
        if rollup.get(hour, 0) != stored.get(hour, 0) + tail.get(hour, 0):
            out.append((hour, hour + dt.timedelta(hours=1)))
        hour += dt.timedelta(hours=1)
    return out


def _store(team: Team, grid: Grid, gpus: list[tuple[int, int]], start: dt.datetime,
           end: dt.datetime) -> int:
    """Recompute and replace the stored buckets in [start, end) (multiples of the step) of
    `gpus`, (GPU id, host id) pairs."""
    if start >= end:
        return 0
    figures = bucket_figures(gpus, grid.resolution, start, end, grid.step_s, with_ids=True)
    rows = []
    k = int(start.timestamp()) // grid.step_s
    while k * grid.step_s < end.timestamp():
        m, p10, p90, power, rep, us, un, ps, pn, e, sim, n = figures.rows.get(
            k, [None, None, None, None, 0, 0.0, 0, 0.0, 0, 0.0, 0, 0])
        bits = figures.gpu_bits.get(k, 0)
        host_ids, energy_j = figures.host_energy.get(k, (np.zeros(0), np.zeros(0)))
        ids = figures.gpu_ids.get(k, [])
        rows.append(FleetBucket(
            team=team, step_s=grid.step_s, bucket=dt.datetime.fromtimestamp(
                k * grid.step_s, dt.UTC),
            util_mean=m, util_p10=p10, util_p90=p90, power_w=power, power_gpus=rep,
            util_sum=us, util_n=un, power_sum_w=ps, power_n=pn, energy_j=e,
            simulated_samples=sim, samples=n,
            gpu_bits=bits.to_bytes((bits.bit_length() + 7) // 8, "little"),
            n_gpus=len(ids), gpu_id_sum=sum(ids),
            host_ids=host_ids.astype("<i4").tobytes(),
            host_energy_j=energy_j.astype("<f8").tobytes()))
        k += 1
    FleetBucket.objects.filter(team=team, step_s=grid.step_s, bucket__gte=start,
                               bucket__lt=end).delete()
    FleetBucket.objects.bulk_create(rows, batch_size=500)
    return len(rows)


def _store_open(team: Team, grid: Grid, fill: FleetFill | None, until: dt.datetime,
                closed_by: dt.datetime) -> tuple[dt.datetime | None, int]:
    """The open bucket's cells (FleetOpenCell) over its complete rollup steps, [until, through),
    replacing all but the previous run's; returns (through, cells) for FleetFill, through None
    when nothing of the bucket is complete yet or the grid is its rollup's own step (the open
    bucket is then one rollup row per GPU, the cells would save nothing). Cells that still hold
    what the rollups do are kept as they are: the month's change once an hour, and rewriting
    10,000 of them every minute was ~0.15 s of each run at 10,000 GPUs."""
    through = floor(closed_by, dt.timedelta(seconds=ROLLUP_STEP_S[grid.resolution]))
    table = ROLLUPS[grid.resolution]._meta.db_table
    params = {"team": team.id, "step": grid.step_s, "start": until, "through": through}
    if (fill is not None and through > until
            and (fill.until, fill.open_through) == (until, through)):
        with connection.cursor() as cursor:
            cursor.execute(team_open_cells_current_sql(table), params)
            if cursor.fetchone()[0]:
                return through, fill.open_cells
    old = FleetOpenCell.objects.filter(team=team, step_s=grid.step_s)
    if fill is not None and fill.open_through is not None and (
            fill.until, fill.open_through) != (until, through):
        old = old.exclude(bucket=fill.until, through=fill.open_through)
    old.delete()
    if through <= until:
        return None, 0
    with connection.cursor() as cursor:
        cursor.execute(team_open_cells_sql(table), params)
        return through, cursor.rowcount


def _merge(periods: list[tuple[dt.datetime, dt.datetime]]) -> list[tuple[dt.datetime, dt.datetime]]:
    out: list[list[dt.datetime]] = []
    for lo, hi in sorted(periods):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def fill_team(team: Team, now: dt.datetime | None = None) -> dict:
    """Bring one team's fleet rollups up to date; returns what was recomputed per step."""
    now = now or timezone.now()
    gpus = team_gpus(team)
    if len(gpus) <= MAX_GPU_SERIES:  # the page draws per-GPU lines live: nothing to store
        FleetFill.objects.filter(team=team).delete()
        FleetBucket.objects.filter(team=team).delete()
        FleetOpenCell.objects.filter(team=team).delete()
        return {}
    pairs = sorted((g.id, g.host_id) for g in gpus)
    gpu_ids = [g for g, _ in pairs]
    fills = {f.step_s: f for f in FleetFill.objects.filter(team=team)}
    changed = changed_periods(team, gpu_ids, fills, now)
    # Buckets ending by then are closed and complete: GRACE after their end, or sooner by the
    # data.
    complete = complete_through(team, gpu_ids, now)
    closed_by = max(now - GRACE, complete) if complete else now - GRACE
    done = {}
    for grid in GRIDS.values():
        t0 = time.perf_counter()
        step = grid.step
        want_start = floor(now - grid.keep, step)
        until = floor(closed_by, step)
        fill = fills.get(grid.step_s)
        periods = []
        if fill is None or fill.start > want_start or fill.until <= want_start:
            periods.append((want_start, until))  # first run, or too far behind: all of it
        else:
            redo_from = max(fill.start, floor(min(late.reach(fill.filled_at), fill.until),
                                              step))
            if grid.resolution == "minute":
                # The lookback's whole hours are recomputed only where the hour rollups say
                # they changed; the buckets before the first whole hour (the kept span's
                # edge) as before, and the new ones.
                first_hour = ceil(redo_from, dt.timedelta(hours=1))
                periods.append((redo_from, min(first_hour, fill.until)))
                periods += changed_hours(team, grid, gpu_ids, first_hour, fill.until)
                periods.append((fill.until, until))
            else:
                periods.append((redo_from, until))
            periods += [(max(lo, fill.start), min(hi, fill.until)) for lo, hi in changed]
        # Whole buckets (a changed hour inside a 3-hour bucket recomputes the bucket), within
        # what is kept and closed.
        periods = [(max(floor(lo, step), want_start), min(ceil(hi, step), until))
                   for lo, hi in periods]
        stored = 0
        with transaction.atomic():
            for lo, hi in _merge([(lo, hi) for lo, hi in periods if lo < hi]):
                stored += _store(team, grid, pairs, lo, hi)
            FleetBucket.objects.filter(team=team, step_s=grid.step_s,
                                       bucket__lt=want_start).delete()
            through, cells = _store_open(team, grid, fill, until, closed_by)
            FleetFill.objects.update_or_create(
                team=team, step_s=grid.step_s,
                defaults={"start": want_start, "until": until, "filled_at": now,
                          "duration_s": time.perf_counter() - t0, "open_through": through,
                          "open_cells": cells})
        done[grid.step_s] = {"buckets": stored, "s": round(time.perf_counter() - t0, 3)}
    return done


def fill(now: dt.datetime | None = None) -> dict:
    """Every team's fleet rollups (PostgreSQL: SQLite installs keep computing charts live)."""
    if connection.vendor != "postgresql":
        return {}
    out = {}
    for team in Team.objects.filter(hosts__isnull=False).distinct().order_by("id"):
        out[team.slug] = fill_team(team, now)
    return out
