"""A host's average power per interval, per GPU and for the host: what the agent measured,
shown as numbers (host page table, GET /api/v1/teams/{slug}/hosts/{id}/power).

Intervals are the host chart's display buckets (greenops.telemetry.fleet.grid), read from the
same rollups. A GPU's figure is the mean of its power samples in the interval; the host's is
the sum of its GPUs' means, over the GPUs that reported (the count is given beside it, so a
host figure missing a GPU never passes for the whole host). An interval without any power
sample is left out: unknown, never 0 W.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from greenops.telemetry.fleet import grid
from greenops.telemetry.models import ROLLUPS, Host


def power_intervals(host: Host, range_key: str, now: dt.datetime | None = None) -> dict:
    gpus = {g.id: g for g in host.gpus.all()}
    resolution, step_s, start, end, _n = grid(range_key, now)
    t0 = start.timestamp()
    # (display bucket, gpu id) -> [power sum W, power samples, simulated samples, samples]
    cells: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0.0, 0, 0, 0])
    rows = (ROLLUPS[resolution].objects
            .filter(gpu_id__in=list(gpus), bucket__gte=start, bucket__lt=end, power_n__gt=0)
            .values_list("gpu_id", "bucket", "power_sum_w", "power_n", "simulated_samples",
                         "samples"))
    for gpu_id, bucket, p_sum, p_n, sim, n in rows:
        c = cells[(int((bucket.timestamp() - t0) // step_s), gpu_id)]
        c[0] += p_sum
        c[1] += p_n
        c[2] += sim
        c[3] += n
    by_bucket: dict[int, dict[int, list[float]]] = defaultdict(dict)
    for (k, gpu_id), c in cells.items():
        by_bucket[k][gpu_id] = c
    intervals = []
    for k in sorted(by_bucket):
        per_gpu = [{"index": gpus[g].index, "uuid": gpus[g].uuid,
                    "avg_power_w": round(c[0] / c[1], 3), "power_samples": int(c[1])}
                   for g, c in sorted(by_bucket[k].items(), key=lambda x: gpus[x[0]].index)]
        b_start = dt.datetime.fromtimestamp(t0 + k * step_s, dt.UTC)
        intervals.append({
            "start": b_start.isoformat(),
            "end": min(b_start + dt.timedelta(seconds=step_s), end).isoformat(),
            "host_avg_power_w": round(sum(g["avg_power_w"] for g in per_gpu), 3),
            "gpus_reporting": len(per_gpu),
            "simulated": any(c[2] for c in by_bucket[k].values()),
            "gpus": per_gpu,
        })
    return {"host": host.name, "range": range_key, "resolution": resolution, "step_s": step_s,
            "start": start.isoformat(), "end": end.isoformat(), "gpus": len(gpus),
            "intervals": intervals}
