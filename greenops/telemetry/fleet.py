"""Fleet series within a point budget, for charts that must read at every range for one GPU or
a thousand (Grafana's "max data points"): rollups are regrouped into display buckets of a
whole number of rollup steps so that no series has more than `max_points` points, and a large
fleet is summarised per bucket (mean with a p10-p90 band across GPUs) instead of one line per
GPU. Reads rollups only, never raw samples.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from typing import NamedTuple

import numpy as np
from django.db import connection
from django.utils import timezone

from greenops.chart_style import MAX_POINTS
from greenops.db_router import read_connection
from greenops.quantiles import sorted_quantile as quantile
from greenops.teams.models import Team
from greenops.telemetry import store
from greenops.telemetry.models import ROLLUPS, FleetBucket, FleetFill, FleetOpenCell, Gpu, Host
from greenops.telemetry.queries import MAX_GPU_SERIES, RANGES, RESOLUTION, team_gpus, window
from greenops.units import J_PER_KWH
from greenops.windows import Window, floor


def display_step_s(span_s: float, source_step_s: int, max_points: int = MAX_POINTS) -> int:
    """The smallest whole number of rollup steps that fits the span into max_points buckets.
    E.g. 24 h of minute rollups in 300 points: 60 s x ceil(86,400 / (300 x 60)) = 300 s."""
    return source_step_s * max(1, math.ceil(span_s / (max_points * source_step_s)))


def grid(range_key: str, now: dt.datetime | None = None,
         max_points: int = MAX_POINTS) -> tuple[str, int, dt.datetime, dt.datetime, int]:
    """(rollup resolution, display step in seconds, first bucket, end, number of buckets) of a
    range's chart. Display buckets are multiples of the step since the Unix epoch (as rollup
    buckets are), so a closed bucket is the same bucket at every page view and can be stored
    (greenops.telemetry.fleetroll); the chart starts at the display bucket holding the range's
    start (24 h of 5-minute buckets may show up to 4 minutes more than 24 h)."""
    resolution, source_step = RESOLUTION[range_key]
    w = window(range_key, now)
    step_s = display_step_s(w.span_s, int(source_step.total_seconds()), max_points)
    start = floor(w.start, dt.timedelta(seconds=step_s))
    return resolution, step_s, start, w.end, math.ceil((w.end - start).total_seconds() / step_s)


def fleet_series(gpus: list[Gpu], range_key: str, now: dt.datetime | None = None,
                 max_points: int = MAX_POINTS) -> dict:
    """Utilisation, power and energy in display buckets, computed from the rollups.

    `per_gpu` (at most MAX_GPU_SERIES GPUs): one series per GPU. Otherwise `fleet`: per bucket
    the mean, p10 and p90 of the GPUs' utilisation, the fleet's total power (sum of each GPU's
    mean power) and its energy per host. team_fleet_series reads the closed buckets of a team's
    fleet from its stored fleet rollups instead.
    """
    resolution, step_s, start, end, n_buckets = grid(range_key, now, max_points)
    if len(gpus) > MAX_GPU_SERIES and connection.vendor == "postgresql":
        figures = bucket_figures([(g.id, g.host_id) for g in gpus], resolution, start, end,
                                 step_s)
        return assemble(len(gpus), {g.host_id: g.host.name for g in gpus}, range_key,
                        resolution, start, end, step_s, figures,
                        gpus_reporting=figures.reporting)
    t0 = start.timestamp()
    by_id = {g.id: g for g in gpus}
    # (gpu, display bucket) -> [util_sum, util_n, power_sum, power_n, energy_j, sim samples,
    # samples]
    cells: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0.0] * 7)
    rows = (ROLLUPS[resolution].objects
            .filter(gpu_id__in=list(by_id), bucket__gte=start, bucket__lt=end)
            .values_list("gpu_id", "bucket", "util_sum", "util_n", "power_sum_w", "power_n",
                         "energy_j", "simulated_samples", "samples"))
    for gpu_id, bucket, u_sum, u_n, p_sum, p_n, e_j, sim, n in rows.iterator(chunk_size=10_000):
        c = cells[(gpu_id, int((bucket.timestamp() - t0) // step_s))]
        c[0] += u_sum
        c[1] += u_n
        c[2] += p_sum or 0.0
        c[3] += p_n
        c[4] += e_j
        c[5] += sim
        c[6] += n
    t = [dt.datetime.fromtimestamp(t0 + k * step_s, dt.UTC).isoformat()
         for k in range(n_buckets)]
    out = {"range": range_key, "label": RANGES[range_key].label, "resolution": resolution,
           "start": start.isoformat(), "end": end.isoformat(), "step_s": step_s, "t": t,
           "window_text": _window_text(start, end),
           "simulated": any(c[5] for c in cells.values()), "totals": _totals(gpus, cells)}
    energy_by_host: dict[str, list[float]] = defaultdict(lambda: [0.0] * n_buckets)
    for (gpu_id, k), c in cells.items():
        energy_by_host[by_id[gpu_id].host.name][k] += c[4] / J_PER_KWH
    names = sorted(energy_by_host)
    out["energy_kwh_by_host"], out["energy_kwh_other_hosts"] = top_hosts(
        names, np.array([energy_by_host[h] for h in names]).reshape(len(names), n_buckets))
    if len(gpus) <= MAX_GPU_SERIES:
        out["grouping"] = "gpu"
        out["series"] = _per_gpu(gpus, cells, n_buckets)
        return out
    out["grouping"] = "fleet"
    util: list[list[float]] = [[] for _ in range(n_buckets)]
    power = [0.0] * n_buckets
    reporting = [0] * n_buckets
    for (_, k), c in cells.items():
        if c[1]:
            util[k].append(c[0] / c[1])
        if c[3]:
            power[k] += c[2] / c[3]
            reporting[k] += 1
    mean, p10, p90 = [], [], []
    for values in util:
        values.sort()
        mean.append(round(sum(values) / len(values), 2) if values else None)
        p10.append(round(quantile(values, 0.1), 2) if values else None)
        p90.append(round(quantile(values, 0.9), 2) if values else None)
    out.update(util_mean_pct=mean, util_p10_pct=p10, util_p90_pct=p90,
               power_w=[round(p, 1) if n else None for p, n in zip(power, reporting,
                                                                     strict=True)],
               gpus_reporting=reporting)
    return out


# Hosts the energy chart stacks one by one; past that the hosts using the most energy in the
# range, and the others as one series (top_hosts): 1,250 stacked hosts are 1,250 legend
# entries nobody reads and, at ~300 points each, megabytes of page.
TOP_HOSTS = 8

# What a host list shows of each host (team_hosts).
HOST_FIELDS = ("id", "name", "removed_at", "instance_type", "region", "agent_version",
               "last_seen")
# A row per host with its GPUs' ids as an array, in SQL written out: 1,000 Gpu objects cost
# more than the stored chart rows, 1,000 (id, host) rows a few ms more, and the ORM spelling of
# this one (ArrayAgg, GROUP BY every field, values()) took 3-5 ms to build and convert against
# 1 ms for the statement itself.
_TEAM_HOSTS = (f"SELECT {', '.join(f'h.{f}' for f in HOST_FIELDS)}, "
               f"ARRAY(SELECT g.id FROM {Gpu._meta.db_table} g WHERE g.host_id = h.id "
               f"ORDER BY g.id) FROM {Host._meta.db_table} h WHERE h.team_id = %s "
               "ORDER BY h.name")


def team_hosts(team: Team, now: dt.datetime) -> list[dict]:
    """Every host of the team, removed ones too (their history stays in the charts), offline
    first then by name, as dicts of HOST_FIELDS with `offline` (Host.seen_online's negation)
    and `gpu_ids` (its GPUs' ids): the team home's host table and its charts from one query on
    PostgreSQL; elsewhere the ids from a second query."""
    if connection.vendor == "postgresql":
        with store.server_bound_cursor(prepare=True, using=read_connection()) as cursor:
            cursor.execute(_TEAM_HOSTS, [team.id])
            rows = [{**dict(zip(HOST_FIELDS, r[:-1], strict=True)), "gpu_ids": r[-1]}
                    for r in cursor.fetchall()]
    else:
        rows = list(Host.objects.filter(team=team).order_by("name").values(*HOST_FIELDS))
        ids: dict[int, list[int]] = defaultdict(list)
        for gpu_id, host_id in (Gpu.objects.filter(host__team=team).order_by("id")
                                .values_list("id", "host_id")):
            ids[host_id].append(gpu_id)
        for row in rows:
            row["gpu_ids"] = ids.get(row["id"], [])
    for row in rows:
        row["offline"] = not Host.seen_online(row["last_seen"], now)
    rows.sort(key=lambda r: not r["offline"])  # stable: by name within each group
    return rows


def team_fleet_series(team: Team, range_key: str, now: dt.datetime | None = None,
                      hosts: list[dict] | None = None) -> dict:
    """The team dashboard's charts: fleet_series over the team's GPUs, reading the closed
    display buckets from the team's stored fleet rollups (greenops.telemetry.fleetroll) and
    computing only the buckets after them (the still-filling one, and any the fill task has
    not stored yet) from the rollups -- from the rollup rows after the fill's open cells, where
    it stored them for the first of those buckets. Without stored buckets covering the chart's
    start (new install, SQLite, a team of MAX_GPU_SERIES GPUs or fewer) it is fleet_series
    itself.
    `hosts`: team_hosts(team, ...), when the caller read them already."""
    if connection.vendor != "postgresql":
        return fleet_series(team_gpus(team), range_key, now)
    if hosts is None:
        hosts = team_hosts(team, now or timezone.now())
    gpus = [(gpu_id, h["id"]) for h in hosts for gpu_id in h["gpu_ids"]]
    if len(gpus) <= MAX_GPU_SERIES:
        return fleet_series(team_gpus(team), range_key, now)
    host_name = {h["id"]: h["name"] for h in hosts if h["gpu_ids"]}
    resolution, step_s, start, end, _ = grid(range_key, now)
    fill, rows = _stored_rows(team, step_s, start, end)
    filled_until = fill.until if fill else None
    if filled_until is None or filled_until <= start:
        figures = bucket_figures(gpus, resolution, start, end, step_s)
        return assemble(len(gpus), host_name, range_key, resolution, start, end, step_s,
                        figures, gpus_reporting=figures.reporting)
    until = min(filled_until, end)
    stored = BucketFigures.from_rows(rows, step_s)
    expected = round((until - start).total_seconds() / step_s)
    if len(stored.rows) != expected:  # a gap (rows deleted by hand): never draw it as empty
        return fleet_series(team_gpus(team), range_key, now)
    if until < end:
        # The tail's GPUs matter only for the GPUs reporting over the range: when every one of
        # the team's GPUs reported in a stored bucket already, the tail (which reads only
        # those GPUs) cannot add one, so it is not asked for them -- an array of up to 1,000
        # ids per live bucket, and its bitmap, were ~0.8 ms of a last-hour view's ~6 ms tail.
        new = gpu_bitmap([g for g, _ in gpus]) & ~stored.union_bits()
        # The open bucket's complete part summed per GPU by the last fill run, when it is the
        # first bucket of this tail and before this view's end: the view then reads the rollup
        # rows after it only (fleetroll's open cells).
        cells = (fill.open_through, fill.open_cells) if (
            until == filled_until and fill.open_through is not None
            and until < fill.open_through <= end) else None
        tail = dict(prepare=True, with_ids=bool(new), count_reporting=False, team_id=team.id)
        figures = bucket_figures(gpus, resolution, until, end, step_s, open_cells=cells, **tail)
        if figures.open_cells_missing:  # replaced by two fill runs since the read above
            figures = bucket_figures(gpus, resolution, until, end, step_s, **tail)
        stored.extend(figures)
    return assemble(len(gpus), host_name, range_key, resolution, start, end, step_s, stored,
                    gpus_reporting=stored.reporting_count())


class StoredFill(NamedTuple):
    until: dt.datetime  # FleetFill's, as the page read it
    open_through: dt.datetime | None
    open_cells: int


def _stored_rows(team: Team, step_s: int, start: dt.datetime, end: dt.datetime
                 ) -> tuple[StoredFill | None, list[tuple]]:
    """How far the team's fleet rollups at step_s are stored, if they are from `start` on
    (FleetFill's until and open cells, else None), and the stored buckets in
    [start, min(until, end)) as BucketFigures.COLUMNS in bucket order: one prepared statement,
    where the fill and the rows were two ORM queries built on every view. In binary: each row
    carries two bytea arrays (hosts and their joules) that text results sent as hex, a third of
    a 24-hour view's chart time to decode."""
    with store.server_bound_cursor(binary=True, prepare=True, using=read_connection()) as cursor:
        cursor.execute(_STORED_SQL, {"team": team.id, "step": step_s, "start": start,
                                     "end": end})
        rows = cursor.fetchall()
    if not rows:
        return None, []
    return StoredFill(*rows[0][:3]), [r[3:] for r in rows if r[3] is not None]


class BucketFigures:
    """Per display bucket (keyed by its index since the epoch: bucket start = k x step) what
    the chart draws and the sums behind the totals, from the rollups (bucket_figures) or from
    stored FleetBucket rows (from_rows). `reporting`: GPUs with a rollup row in the range when
    computed over the whole range, else None (the union of `gpu_bits` answers it)."""

    COLUMNS = ("bucket", "util_mean", "util_p10", "util_p90", "power_w", "power_gpus",
               "util_sum", "util_n", "power_sum_w", "power_n", "energy_j",
               "simulated_samples", "samples", "gpu_bits", "host_ids", "host_energy_j")

    def __init__(self, step_s: int) -> None:
        self.step_s = step_s
        # k -> [mean, p10, p90, power, power_gpus, us, un, ps, pn, e, sim, n]
        self.rows: dict[int, list] = {}
        # k -> (host ids, their joules): numpy arrays (int32, float64)
        self.host_energy: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.gpu_bits: dict[int, int] = {}  # k -> bitmap of Gpu ids
        self.gpu_ids: dict[int, list[int]] = {}  # k -> Gpu ids (from the rollups only)
        self.reporting: int | None = None
        # Asked to add stored open cells (bucket_figures' open_cells) that are gone.
        self.open_cells_missing = False

    @classmethod
    def from_rows(cls, rows, step_s: int) -> BucketFigures:
        out = cls(step_s)
        for bucket, *figures, bits, host_ids, energy_j in rows:
            k = int(bucket.timestamp()) // step_s
            out.rows[k] = figures
            out.gpu_bits[k] = int.from_bytes(bytes(bits), "little")
            out.host_energy[k] = (np.frombuffer(bytes(host_ids), "<i4"),
                                  np.frombuffer(bytes(energy_j), "<f8"))
        return out

    def extend(self, other: BucketFigures) -> None:
        self.rows.update(other.rows)
        self.host_energy.update(other.host_energy)
        self.gpu_bits.update(other.gpu_bits)

    def union_bits(self) -> int:
        union = 0
        for bits in self.gpu_bits.values():
            union |= bits
        return union

    def reporting_count(self) -> int:
        return self.union_bits().bit_count()


_STORED_SQL = (
    f"SELECT f.until, f.open_through, f.open_cells, "
    f"{', '.join(f'b.{c}' for c in BucketFigures.COLUMNS)} "
    f"FROM {FleetFill._meta.db_table} f LEFT JOIN {FleetBucket._meta.db_table} b "
    "ON b.team_id = f.team_id AND b.step_s = f.step_s AND b.bucket >= %(start)s "
    "AND b.bucket < least(f.until, %(end)s) "
    "WHERE f.team_id = %(team)s AND f.step_s = %(step)s AND f.start <= %(start)s "
    "ORDER BY b.bucket")


def gpu_bitmap(gpu_ids) -> int:
    """Bit i set for each Gpu id i. In numpy: OR-ing 1,000 shifted ints into a growing
    1,000-bit int one by one took 0.4 ms per bucket, paid for every live bucket of a view."""
    ids = np.asarray(gpu_ids, dtype=np.int64)
    if not ids.size:
        return 0
    flags = np.zeros(int(ids.max()) + 1, dtype=bool)
    flags[ids] = True
    return int.from_bytes(np.packbits(flags, bitorder="little").tobytes(), "little")


# The fleet view in one statement: a thousand GPUs x 300 display buckets are 300,000 cells,
# too many to pull into Python for each page view. Per GPU and display bucket (k: the bucket's
# index since the epoch) the sums (as the Python path above), then per bucket the mean, p10 and
# p90 across GPUs (percentile_cont is the linear interpolation `quantile` implements), the sum
# of the GPUs' mean power and the sums behind the totals; energy per host and bucket; and the
# GPUs reporting (over the range, or per bucket for the fleet rollups' bitmaps).
_FLEET_SQL = """
    WITH cell AS ({cell}), per_bucket AS (
        SELECT k, avg(us / un) FILTER (WHERE un > 0) AS mean,
            percentile_cont(0.1) WITHIN GROUP (ORDER BY us / un) FILTER (WHERE un > 0) AS p10,
            percentile_cont(0.9) WITHIN GROUP (ORDER BY us / un) FILTER (WHERE un > 0) AS p90,
            sum(ps / pn) FILTER (WHERE pn > 0) AS power, count(*) FILTER (WHERE pn > 0) AS rep,
            sum(us) AS us, sum(un)::bigint AS un, sum(ps) AS ps, sum(pn)::bigint AS pn,
            sum(e) AS e, sum(sim)::bigint AS sim, sum(n)::bigint AS n, {ids} AS ids
        FROM cell GROUP BY k
    ), per_host AS (
        SELECT host_id, k, sum(e) AS e FROM cell GROUP BY 1, 2
    )
    SELECT 0, k, mean, p10, p90, power, rep, us, un, ps, pn, e, sim, n, ids FROM per_bucket
    UNION ALL SELECT 1, k, host_id, e, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
        NULL, NULL FROM per_host
    {reporting}
"""
# Per GPU and display bucket: the rollup columns summed (alias, the rollup row's expression,
# FleetOpenCell's column holding its sum). date_part (double precision), not extract (numeric):
# exact for whole-second buckets and cheaper per row.
_CELL_SUMS = (("us", "r.util_sum", "util_sum"), ("un", "r.util_n", "util_n"),
              ("ps", "coalesce(r.power_sum_w, 0)", "power_sum_w"), ("pn", "r.power_n", "power_n"),
              ("e", "r.energy_j", "energy_j"), ("sim", "r.simulated_samples", "simulated_samples"),
              ("n", "r.samples", "samples"))
_TEAM_GPUS = (f"SELECT g.id AS gpu_id, g.host_id FROM {Host._meta.db_table} h JOIN "
              f"{Gpu._meta.db_table} g ON g.host_id = h.id WHERE h.team_id = %(team)s")
_K = "floor(date_part('epoch', {t}.bucket) / %(step)s)::bigint"
_OPEN = FleetOpenCell._meta.db_table
_OPEN_GEN = ("o.team_id = %(team)s AND o.step_s = %(step)s AND o.bucket = %(start)s"
             " AND o.through = %(through)s")
# The open cells of one generation, as the fill wrote them (team_open_cells_sql), stand in for
# the rollup rows of [start, through).
_OPEN_ROWS = (f"SELECT o.gpu_id, {_K.format(t='o')} AS k, "
              + ", ".join(f"o.{c} AS {a}" for a, _, c in _CELL_SUMS)
              + f" FROM {_OPEN} o WHERE {_OPEN_GEN}")
_OPEN_PRESENT_SQL = f"""UNION ALL SELECT 3, EXISTS (SELECT 1 FROM {_OPEN} o WHERE {_OPEN_GEN})::int,
        NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL"""


# A team's rollup rows of [start, through), which its open cells sum.
_OPEN_SPAN = ("r.bucket >= %(start)s AND r.bucket < %(through)s AND r.gpu_id IN"
              f" (SELECT gpu_id FROM ({_TEAM_GPUS}) AS t)")


def team_open_cells_sql(table: str) -> str:
    """The INSERT of a team's open cells over [start, through) from the `table` rollups: per GPU
    the sums the page's cells take (_CELL_SUMS), so that its cells from them plus the rollup
    rows after `through` are the cells it would sum from the rollups alone."""
    columns = ", ".join(c for _, _, c in _CELL_SUMS)
    sums = ", ".join(f"sum({e})" for _, e, _ in _CELL_SUMS)
    return (f"INSERT INTO {_OPEN} (team_id, step_s, bucket, through, gpu_id, {columns}) "
            f"SELECT %(team)s, %(step)s, %(start)s, %(through)s, r.gpu_id, {sums} FROM {table} r"
            f" WHERE {_OPEN_SPAN} GROUP BY r.gpu_id")


def team_open_cells_current_sql(table: str) -> str:
    """Whether a team's stored open cells of [start, through) still hold what the `table`
    rollups do: the same samples (any batch adds samples; a GPU deleted, or one moved to
    another team, takes its own away), as the fill's hour fingerprints compare them."""
    return (f"SELECT (SELECT coalesce(sum(r.samples), 0) FROM {table} r WHERE {_OPEN_SPAN})"
            f" = (SELECT coalesce(sum(o.samples), 0) FROM {_OPEN} o WHERE {_OPEN_GEN})")


def _cell_sql(table: str, one_row_each: bool, by_team: bool = False,
              open_cells: bool = False) -> str:
    """The `cell` CTE, each cell with its GPU's host. one_row_each: the display step is the
    rollup's own (the last hour's minutes, the week's hours, the quarter's days), so each rollup
    row is one cell -- no sort and group (a fifth of the live tail). The GPUs come as two
    parallel arrays (ids, their hosts' ids) joined to the rollups: the host of each cell without
    a join to the GPU table, and no `gpu_id = ANY(<1,000 ids>)`, which PostgreSQL plans by
    estimating each element's selectivity in turn (1.4 ms of a last-hour view's tail). bigint[],
    the type of gpu_id: an int4 array made the comparison cross-type, which is not hashed.
    open_cells (by_team, the page's tail): the fill's open cells for [start, through), then the
    rollup rows from `through` on."""
    sums = ", ".join(f"{e} AS {a}" if one_row_each else f"sum({e}) AS {a}"
                     for a, e, _ in _CELL_SUMS)
    k = _K.format(t="r")
    in_range = "r.bucket >= %(start)s AND r.bucket < %(end)s"
    team_gpus = _TEAM_GPUS
    if by_team and not one_row_each:
        # Summed per GPU and bucket first, over the rollup rows of the team's GPUs (a semi-join),
        # and only then given their hosts: the per-GPU hash aggregate then holds one entry per
        # cell (10,000) where grouping by host too sorted every row (50,000 minute rows of a
        # 10,000-GPU day view's live 5-minute bucket, spilling to disk at the default work_mem):
        # 35 instead of 48-50 ms. With open cells, each cell is the sum of its open cell and its
        # rollup rows after `through`.
        def rows(lo: str) -> str:
            return (f"SELECT r.gpu_id, {k} AS k, "
                    + ", ".join(f"{e} AS {a}" for a, e, _ in _CELL_SUMS)
                    + f" FROM {table} r WHERE r.bucket >= {lo} AND r.bucket < %(end)s AND"
                    f" r.gpu_id IN (SELECT gpu_id FROM ({team_gpus}) AS t)")

        source = (f"{_OPEN_ROWS} UNION ALL {rows('%(through)s')}" if open_cells
                  else rows("%(start)s"))
        outer = ", ".join(f"c.{a}" for a, _, _ in _CELL_SUMS)
        summed = ", ".join(f"sum(x.{a}) AS {a}" for a, _, _ in _CELL_SUMS)
        return (f"SELECT c.gpu_id, g.host_id, c.k, {outer} FROM (SELECT x.gpu_id, x.k, {summed}"
                f" FROM ({source}) AS x GROUP BY 1, 2) AS c"
                f" JOIN {Gpu._meta.db_table} g ON g.id = c.gpu_id")
    gpus = (f"({team_gpus}) AS t" if by_team
            else "unnest(%(gpus)s::bigint[], %(hosts)s::bigint[]) AS t(gpu_id, host_id)")
    return (f"SELECT r.gpu_id, t.host_id, {k} AS k, {sums} FROM {gpus} JOIN {table} r"
            f" ON r.gpu_id = t.gpu_id WHERE {in_range}"
            + ("" if one_row_each else " GROUP BY 1, 2, 3"))


# Each rollup's own step, from the one table of ranges and rollups (queries.RESOLUTION).
ROLLUP_STEP_S = {name: int(step.total_seconds()) for name, step in RESOLUTION.values()}
_REPORTING_SQL = """UNION ALL SELECT 2, count(DISTINCT gpu_id), NULL, NULL, NULL, NULL, NULL,
        NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM cell"""


def bucket_figures(gpus: list[tuple[int, int]], resolution: str, start: dt.datetime,
                   end: dt.datetime, step_s: int, with_ids: bool = False,
                   count_reporting: bool | None = None, prepare: bool = False,
                   team_id: int | None = None,
                   open_cells: tuple[dt.datetime, int] | None = None) -> BucketFigures:
    """The fleet's figures per display bucket over [start, end) (start a multiple of step_s)
    from the `resolution` rollups of `gpus` ((GPU id, its host's id) pairs), computed in
    PostgreSQL. with_ids: each bucket's GPUs as a bitmap (stored rollups, a stored page's tail).
    count_reporting (default: not with_ids): the GPUs reporting over [start, end) as
    `reporting`. prepare: a prepared statement (the page's live tail, the same few minutes on
    every view; not the fill's ranges of hours to days, whose best plan depends on the span).
    team_id: `gpus` are every GPU of that team (the page's tail), so the statement selects them
    itself -- two arrays of 10,000 ids were 17 ms of a 10,000-GPU page's CPU to write out and
    more for PostgreSQL to parse, on every view.
    open_cells (with team_id): (through, count) of the fill's open cells of the bucket at
    `start` (FleetFill.open_through, open_cells): they stand in for the rollup rows of
    [start, through). When that generation is gone (count > 0 and no row found) the result
    says so (open_cells_missing) and its figures are not to be used."""
    if count_reporting is None:
        count_reporting = not with_ids
    one_row_each = step_s == ROLLUP_STEP_S[resolution]
    use_open = open_cells is not None and team_id is not None and not one_row_each
    cell = _cell_sql(ROLLUPS[resolution]._meta.db_table, one_row_each,
                     by_team=team_id is not None, open_cells=use_open)
    sql = _FLEET_SQL.format(cell=cell,
                            ids="array_agg(gpu_id)" if with_ids else "NULL::bigint[]",
                            reporting=(_REPORTING_SQL if count_reporting else "")
                            + (_OPEN_PRESENT_SQL if use_open and open_cells[1] else ""))
    params = {"start": start, "end": end, "step": step_s}
    if use_open:
        params["through"] = open_cells[0]
    if team_id is None:
        params.update(gpus=store.int_array(g for g, _ in gpus),
                      hosts=store.int_array(h for _, h in gpus))
    else:
        params["team"] = team_id
    out = BucketFigures(step_s)
    by_host: dict[int, dict[int, float]] = defaultdict(dict)
    db = read_connection()  # the replica for a page's read, the primary for the fill task
    with (store.server_bound_cursor(prepare=True, using=db) if prepare else db.cursor()) as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    for kind, k, *figures in rows:
        if kind == 0:
            out.rows[k] = figures[:12]
            if with_ids:
                out.gpu_ids[k] = figures[12]
                out.gpu_bits[k] = gpu_bitmap(figures[12])
        elif kind == 1:
            by_host[k][int(figures[0])] = figures[1]
        elif kind == 2:
            out.reporting = k
        else:
            out.open_cells_missing = not k
    for k, energy in by_host.items():
        ids = sorted(energy)
        out.host_energy[k] = (np.array(ids, "<i4"), np.array([energy[h] for h in ids], "<f8"))
    return out


def assemble(n_gpus: int, host_name: dict[int, str], range_key: str, resolution: str,
             start: dt.datetime, end: dt.datetime, step_s: int, figures: BucketFigures,
             gpus_reporting: int) -> dict:
    """fleet_series' fleet view of n_gpus GPUs (on the hosts named in host_name) from per-bucket
    figures, however they were obtained: the totals add the buckets' sums in bucket order, so
    stored and live figures give the same totals."""
    n_buckets = math.ceil((end - start).total_seconds() / step_s)
    k0 = int(start.timestamp()) // step_s
    mean: list[float | None] = [None] * n_buckets
    p10: list[float | None] = [None] * n_buckets
    p90: list[float | None] = [None] * n_buckets
    power: list[float | None] = [None] * n_buckets
    reporting = [0] * n_buckets
    sums = [0.0] * 7  # us, un, ps, pn, e, sim, n
    drawn = []  # (bucket index in the chart, k) of the buckets with figures
    for k in sorted(figures.rows):
        i = k - k0
        if not 0 <= i < n_buckets:
            continue
        m, lo, hi, pw, rep, *bucket_sums = figures.rows[k]
        if bucket_sums[6] == 0 and not rep and m is None:
            continue  # an empty bucket (stored so the fill's coverage has no holes)
        mean[i] = round(m, 2) if m is not None else None
        p10[i] = round(lo, 2) if lo is not None else None
        p90[i] = round(hi, 2) if hi is not None else None
        power[i] = round(pw, 1) if rep else None
        reporting[i] = rep
        for j, v in enumerate(bucket_sums):
            sums[j] += v or 0
        drawn.append((i, k))
    us, un, ps, pn, e, sim, n = sums
    # Energy per host and bucket as three flat arrays (host row, chart bucket, kWh), one entry
    # per stored (host, bucket): the hosts' totals and the "other hosts" series are sums over
    # them (np.bincount), and only the drawn hosts get a row of buckets.
    host_ids = np.array(sorted(host_name), dtype=np.int64)
    row_of = np.full(int(host_ids.max(initial=0)) + 1, -1)
    row_of[host_ids] = np.arange(len(host_ids))
    rows, cols, kwh = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    parts = [(i, figures.host_energy[k]) for i, k in drawn if k in figures.host_energy]
    if parts:
        ids = np.concatenate([p[1][0] for p in parts]).astype(np.int64)
        joules = np.concatenate([p[1][1] for p in parts])
        cols = np.repeat([p[0] for p in parts], [len(p[1][0]) for p in parts])
        if ids.max() < len(row_of):  # else hosts deleted since (ids beyond the team's)
            rows = row_of[ids]
        else:
            known = ids < len(row_of)
            rows = np.full(len(ids), -1)
            rows[known] = row_of[ids[known]]
        kwh = joules / J_PER_KWH
        mine = rows >= 0  # hosts no longer in the team: not drawn
        if not mine.all():  # masks over every (host, bucket) only when there is one to drop
            rows, cols, kwh = rows[mine], cols[mine], kwh[mine]
    seen = np.flatnonzero(np.bincount(rows, minlength=len(host_ids)))
    names = [host_name[int(h)] for h in host_ids[seen]]
    top = _top(names, np.bincount(rows, weights=kwh, minlength=len(host_ids))[seen].tolist())
    line_of = np.full(len(host_ids), -1)
    line_of[seen[top]] = np.arange(len(top))
    lines = line_of[rows]
    drawn_kwh = np.zeros((len(top), n_buckets))
    on_line = lines >= 0
    drawn_kwh[lines[on_line], cols[on_line]] = kwh[on_line]
    by_host = dict(sorted((names[j], drawn_kwh[i].tolist()) for i, j in enumerate(top)))
    other = None if len(top) == len(names) else {
        "hosts": len(names) - len(top),
        "kwh": np.bincount(cols[~on_line], weights=kwh[~on_line], minlength=n_buckets).tolist()}
    t = [dt.datetime.fromtimestamp((k0 + i) * step_s, dt.UTC).isoformat()
         for i in range(n_buckets)]
    totals = {"gpus": n_gpus, "gpus_reporting": gpus_reporting,
              "energy_kwh": e / J_PER_KWH,
              "avg_util_pct": us / un if un else None,
              "avg_power_w": ps / pn if pn else None,
              "simulated_samples": int(sim), "measured_samples": int(n - sim)}
    return {"range": range_key, "label": RANGES[range_key].label, "resolution": resolution,
            "start": start.isoformat(), "end": end.isoformat(), "step_s": step_s, "t": t,
            "window_text": _window_text(start, end),
            "simulated": sim > 0, "totals": totals,
            "energy_kwh_by_host": by_host, "energy_kwh_other_hosts": other,
            "grouping": "fleet", "util_mean_pct": mean, "util_p10_pct": p10, "util_p90_pct": p90,
            "power_w": power, "gpus_reporting": reporting}


def top_hosts(names: list[str], kwh: np.ndarray
              ) -> tuple[dict[str, list[float]], dict | None]:
    """The energy chart's series from a (hosts x buckets) kWh matrix, its rows named by `names`:
    every host when at most TOP_HOSTS + 1 used energy in the range, else the TOP_HOSTS using
    the most (ties by name) and {"hosts": how many others, "kwh": their sum per bucket}. Each
    bucket's stacked height stays the fleet's kWh. (assemble does the same from flat arrays.)"""
    top = _top(names, kwh.sum(axis=1).tolist())
    rest = sorted(set(range(len(names))) - set(top))
    return (dict(sorted((names[j], kwh[j].tolist()) for j in top)),
            {"hosts": len(rest), "kwh": kwh[rest].sum(axis=0).tolist()} if rest else None)


def _top(names: list[str], totals: list[float]) -> list[int]:
    """Positions of the hosts the energy chart draws one by one: all when at most
    TOP_HOSTS + 1, else the TOP_HOSTS with the largest totals (ties by name). The rest are one
    series: 1,250 hosts x 289 buckets as Python lists were ~75 ms of a 10,000-GPU page."""
    if len(names) <= TOP_HOSTS + 1:
        return list(range(len(names)))
    return sorted(range(len(names)), key=lambda j: (-totals[j], names[j]))[:TOP_HOSTS]


def _window_text(start: dt.datetime, end: dt.datetime) -> str:
    """The chart's own [start, end), printed as every window is (greenops.windows)."""
    return Window(start, end).text


def _totals(gpus: list[Gpu], cells: dict) -> dict:
    """The range's totals (the cards above the charts), from the same rollup rows."""
    sums = [sum(c[i] for c in cells.values()) for i in range(7)]
    return {"gpus": len(gpus), "gpus_reporting": len({gpu_id for gpu_id, _ in cells}),
            "energy_kwh": sums[4] / J_PER_KWH,
            "avg_util_pct": sums[0] / sums[1] if sums[1] else None,
            "avg_power_w": sums[2] / sums[3] if sums[3] else None,
            "simulated_samples": int(sums[5]), "measured_samples": int(sums[6] - sums[5])}


def _per_gpu(gpus: list[Gpu], cells: dict, n_buckets: int) -> list[dict]:
    series = []
    for g in sorted(gpus, key=lambda g: (g.host.name, g.index)):
        util: list[float | None] = [None] * n_buckets
        power: list[float | None] = [None] * n_buckets
        simulated = False
        for k in range(n_buckets):
            c = cells.get((g.id, k))
            if c is None:
                continue
            util[k] = round(c[0] / c[1], 2) if c[1] else None
            power[k] = round(c[2] / c[3], 1) if c[3] else None
            simulated = simulated or c[5] > 0
        series.append({"gpu_id": g.id, "host": g.host.name, "host_id": g.host_id,
                       "gpu_index": g.index, "util_pct": util, "power_w": power,
                       "simulated": simulated})
    return series
