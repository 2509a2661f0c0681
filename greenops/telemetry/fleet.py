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

from django.db import connection

from greenops.charts import MAX_POINTS
from greenops.telemetry.models import ROLLUPS, Gpu
from greenops.telemetry.queries import MAX_GPU_SERIES, RANGES, RESOLUTION, window
from greenops.units import J_PER_KWH


def display_step_s(span_s: float, source_step_s: int, max_points: int = MAX_POINTS) -> int:
    """The smallest whole number of rollup steps that fits the span into max_points buckets.
    E.g. 24 h of minute rollups in 300 points: 60 s x ceil(86,400 / (300 x 60)) = 300 s."""
    return source_step_s * max(1, math.ceil(span_s / (max_points * source_step_s)))


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on sorted values."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def fleet_series(gpus: list[Gpu], range_key: str, now: dt.datetime | None = None,
                 max_points: int = MAX_POINTS) -> dict:
    """Utilisation, power and energy in display buckets.

    `per_gpu` (at most MAX_GPU_SERIES GPUs): one series per GPU. Otherwise `fleet`: per bucket
    the mean, p10 and p90 of the GPUs' utilisation, the fleet's total power (sum of each GPU's
    mean power) and its energy per host.
    """
    resolution, source_step = RESOLUTION[range_key]
    w = window(range_key, now)
    start, end = w.start, w.end
    source_step_s = int(source_step.total_seconds())
    step_s = display_step_s((end - start).total_seconds(), source_step_s, max_points)
    t0 = start.timestamp()
    by_id = {g.id: g for g in gpus}
    n_buckets = math.ceil((end - start).total_seconds() / step_s)
    if len(gpus) > MAX_GPU_SERIES and connection.vendor == "postgresql":
        return _fleet_in_sql(gpus, range_key, resolution, start, end, step_s, n_buckets)
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
           "simulated": any(c[5] for c in cells.values()), "totals": _totals(gpus, cells)}
    energy_by_host: dict[str, list[float]] = defaultdict(lambda: [0.0] * n_buckets)
    for (gpu_id, k), c in cells.items():
        energy_by_host[by_id[gpu_id].host.name][k] += c[4] / J_PER_KWH
    out["energy_kwh_by_host"] = dict(sorted(energy_by_host.items()))
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


# The fleet view in one statement: a thousand GPUs x 300 display buckets are 300,000 cells,
# too many to pull into Python for each page view. Per GPU and display bucket the sums (as the
# Python path above), then per bucket the mean, p10 and p90 across GPUs (percentile_cont is the
# linear interpolation `quantile` implements) and the sum of the GPUs' mean power; energy per
# host and bucket; and the totals.
_FLEET_SQL = """
    WITH cell AS (
        SELECT r.gpu_id, floor((extract(epoch FROM r.bucket) - %(t0)s) / %(step)s)::int AS k,
            sum(r.util_sum) AS us, sum(r.util_n) AS un, sum(coalesce(r.power_sum_w, 0)) AS ps,
            sum(r.power_n) AS pn, sum(r.energy_j) AS e, sum(r.simulated_samples) AS sim,
            sum(r.samples) AS n
        FROM {table} r
        WHERE r.gpu_id = ANY(%(gpus)s) AND r.bucket >= %(start)s AND r.bucket < %(end)s
        GROUP BY 1, 2
    ), per_bucket AS (
        SELECT k, avg(us / un) FILTER (WHERE un > 0) AS mean,
            percentile_cont(0.1) WITHIN GROUP (ORDER BY us / un) FILTER (WHERE un > 0) AS p10,
            percentile_cont(0.9) WITHIN GROUP (ORDER BY us / un) FILTER (WHERE un > 0) AS p90,
            sum(ps / pn) FILTER (WHERE pn > 0) AS power, count(*) FILTER (WHERE pn > 0) AS rep
        FROM cell GROUP BY k
    ), per_host AS (
        SELECT g.host_id, c.k, sum(c.e) AS e FROM cell c JOIN telemetry_gpu g ON g.id = c.gpu_id
        GROUP BY 1, 2
    )
    SELECT 0, k, NULL::bigint, mean, p10, p90, power, rep FROM per_bucket
    UNION ALL SELECT 1, k, host_id, e, NULL, NULL, NULL, NULL FROM per_host
    UNION ALL SELECT 2, count(DISTINCT gpu_id), NULL, sum(us), sum(un), sum(ps), sum(pn), NULL
        FROM cell
    UNION ALL SELECT 3, NULL, NULL, sum(e), sum(sim), sum(n), NULL, NULL FROM cell
"""


def _fleet_in_sql(gpus: list[Gpu], range_key: str, resolution: str, start: dt.datetime,
                  end: dt.datetime, step_s: int, n_buckets: int) -> dict:
    """fleet_series' fleet view computed in PostgreSQL: the same figures as the Python path
    (tests/test_bench_dashboard.py checks both against raw samples)."""
    t0 = start.timestamp()
    host_name = {g.host_id: g.host.name for g in gpus}
    mean: list[float | None] = [None] * n_buckets
    p10: list[float | None] = [None] * n_buckets
    p90: list[float | None] = [None] * n_buckets
    power: list[float | None] = [None] * n_buckets
    reporting = [0] * n_buckets
    energy_by_host: dict[str, list[float]] = defaultdict(lambda: [0.0] * n_buckets)
    sums = {"us": 0.0, "un": 0, "ps": 0.0, "pn": 0, "e": 0.0, "sim": 0, "n": 0, "gpus": 0}
    sql = _FLEET_SQL.format(table=ROLLUPS[resolution]._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(sql, {"gpus": [g.id for g in gpus], "start": start, "end": end,
                             "t0": t0, "step": step_s})
        rows = cursor.fetchall()
    for kind, k, host_id, a, b, c, d, e in rows:
        if kind == 0:
            mean[k] = round(a, 2) if a is not None else None
            p10[k] = round(b, 2) if b is not None else None
            p90[k] = round(c, 2) if c is not None else None
            power[k] = round(d, 1) if e else None
            reporting[k] = e
        elif kind == 1:
            energy_by_host[host_name[host_id]][k] += a / J_PER_KWH
        elif kind == 2:
            sums.update(gpus=k, us=a or 0.0, un=b or 0, ps=c or 0.0, pn=d or 0)
        else:
            sums.update(e=a or 0.0, sim=b or 0, n=c or 0)
    t = [dt.datetime.fromtimestamp(t0 + k * step_s, dt.UTC).isoformat()
         for k in range(n_buckets)]
    totals = {"gpus": len(gpus), "gpus_reporting": sums["gpus"],
              "energy_kwh": sums["e"] / J_PER_KWH,
              "avg_util_pct": sums["us"] / sums["un"] if sums["un"] else None,
              "avg_power_w": sums["ps"] / sums["pn"] if sums["pn"] else None,
              "simulated_samples": int(sums["sim"]),
              "measured_samples": int(sums["n"] - sums["sim"])}
    return {"range": range_key, "label": RANGES[range_key].label, "resolution": resolution,
            "start": start.isoformat(), "end": end.isoformat(), "step_s": step_s, "t": t,
            "simulated": sums["sim"] > 0, "totals": totals,
            "energy_kwh_by_host": dict(sorted(energy_by_host.items())), "grouping": "fleet",
            "util_mean_pct": mean, "util_p10_pct": p10, "util_p90_pct": p90,
            "power_w": power, "gpus_reporting": reporting}


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
