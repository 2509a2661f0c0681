"""Read side for pages and the API: everything here reads rollups, never raw samples."""

from __future__ import annotations

import datetime as dt

from django.db.models import Case, Count, F, FloatField, Q, Sum, When

from greenops import windows
from greenops.teams.models import Team
from greenops.telemetry.models import ROLLUPS, Gpu, Host
from greenops.units import J_PER_KWH

# Which rollup serves each named range (greenops.windows owns the ranges themselves): about
# 60-1,440 points per series, and the window ends with the current, still-filling bucket.
RESOLUTION: dict[str, tuple[str, dt.timedelta]] = {
    "hour": ("minute", windows.MINUTE),
    "day": ("minute", windows.MINUTE),
    "week": ("hour", windows.HOUR),
    "month": ("hour", windows.HOUR),
    "quarter": ("day", windows.DAY),
}
RANGES = windows.ranges(*RESOLUTION)


def window(range_key: str, now: dt.datetime | None = None) -> windows.Window:
    return windows.named(range_key, now, RESOLUTION[range_key][1])


# Above this many GPUs a page draws one line per host instead of one per GPU: 64 GPUs x 1,440
# minutes is more than a browser should chart, and nobody reads 64 overlapping lines.
MAX_GPU_SERIES = 16

_SUMS = ("util_sum", "util_n", "power_sum_w", "power_n", "energy_j", "samples",
         "simulated_samples")


def _rows(model, gpu_ids: list[int], start: dt.datetime, end: dt.datetime, by_host: bool):
    """(series key, bucket, sums...) ordered by series and time; one query."""
    qs = model.objects.filter(gpu_id__in=gpu_ids, bucket__gte=start, bucket__lt=end)
    if not by_host:
        return qs.order_by("gpu_id", "bucket").values_list("gpu_id", "bucket", *_SUMS)
    # A host's power is the sum of its GPUs' average power in the bucket.
    gpu_power = Case(When(power_n__gt=0, then=F("power_sum_w") / F("power_n")),
                     output_field=FloatField())
    return (
        qs.values("gpu__host_id", "bucket")
        .annotate(util_sum_=Sum("util_sum"), util_n_=Sum("util_n"), power_=Sum(gpu_power),
                  power_n_=Count("gpu_id", filter=Q(power_n__gt=0)), energy_j_=Sum("energy_j"),
                  samples_=Sum("samples"), simulated_=Sum("simulated_samples"))
        .order_by("gpu__host_id", "bucket")
        .values_list("gpu__host_id", "bucket", "util_sum_", "util_n_", "power_", "power_n_",
                     "energy_j_", "samples_", "simulated_")
    )


def usage(gpus: list[Gpu], range_key: str, now: dt.datetime | None = None) -> dict:
    """Series of utilisation, power and energy plus totals, from one rollup query: per GPU, or
    per host when there are more than MAX_GPU_SERIES GPUs."""
    resolution = RESOLUTION[range_key][0]
    w = window(range_key, now)
    start, end = w.start, w.end
    by_host = len(gpus) > MAX_GPU_SERIES
    gpus_of_host: dict[int, list[Gpu]] = {}
    for g in gpus:
        gpus_of_host.setdefault(g.host_id, []).append(g)
    by_id = {g.id: g for g in gpus}
    series: dict[int, dict] = {}
    util_sum = util_n = power_sum = power_n = 0.0
    energy_j = 0.0
    simulated = measured = 0
    rows = _rows(ROLLUPS[resolution], list(by_id), start, end, by_host)
    for key, bucket, u_sum, u_n, p_sum, p_n, e_j, n, sim in rows.iterator(chunk_size=5000):
        s = series.get(key)
        if s is None:
            if by_host:
                host_gpus = gpus_of_host[key]
                s = {"gpu_id": None, "host": host_gpus[0].host.name, "host_id": key,
                     "gpu_index": None, "gpu_name": f"{len(host_gpus)} GPUs"}
            else:
                g = by_id[key]
                s = {"gpu_id": key, "host": g.host.name, "host_id": g.host_id,
                     "gpu_index": g.index, "gpu_name": g.name}
            s.update(t=[], util_pct=[], power_w=[], energy_kwh=[], simulated=False)
            series[key] = s
        s["t"].append(bucket.isoformat())
        s["util_pct"].append(round(u_sum / u_n, 2) if u_n else None)
        if by_host:  # p_sum already is the host's total of per-GPU average power
            s["power_w"].append(round(p_sum, 1) if p_n else None)
        else:
            s["power_w"].append(round(p_sum / p_n, 1) if p_n else None)
        s["energy_kwh"].append(e_j / J_PER_KWH)
        s["simulated"] = s["simulated"] or sim > 0
        util_sum += u_sum
        util_n += u_n
        # Per GPU: sample sums and counts. Per host: per-GPU average powers and how many GPUs
        # reported. Either way power_sum / power_n is the average GPU's power.
        power_sum += p_sum or 0.0
        power_n += p_n
        energy_j += e_j
        simulated += sim
        measured += n - sim
    return {
        "range": range_key,
        "label": w.label,
        "resolution": resolution,
        "grouping": "host" if by_host else "gpu",
        "start": start.isoformat(),
        "end": end.isoformat(),
        "totals": {
            "gpus": len(gpus),
            "gpus_reporting": (sum(len(gpus_of_host[k]) for k in series) if by_host
                               else len(series)),
            "energy_kwh": energy_j / J_PER_KWH,
            "avg_util_pct": util_sum / util_n if util_n else None,
            "avg_power_w": power_sum / power_n if power_n else None,
            "simulated_samples": simulated,
            "measured_samples": measured,
        },
        "series": sorted(series.values(), key=lambda s: (s["host"], s["gpu_index"] or 0)),
    }


def team_gpus(team: Team) -> list[Gpu]:
    return list(Gpu.objects.filter(host__team=team).select_related("host"))


def team_usage(team: Team, range_key: str, now: dt.datetime | None = None) -> dict:
    return {"team": team.slug, **usage(team_gpus(team), range_key, now)}


def host_usage(host: Host, range_key: str, now: dt.datetime | None = None) -> dict:
    return usage(list(host.gpus.select_related("host")), range_key, now)
