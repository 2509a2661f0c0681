"""Read side for pages and the API: everything here reads rollups, never raw samples."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.utils import timezone

from greenops.teams.models import Team
from greenops.telemetry.models import ROLLUPS, Gpu, Host

J_PER_KWH = 3_600_000.0


@dataclass(frozen=True)
class Range:
    label: str
    span: dt.timedelta
    resolution: str  # key of ROLLUPS
    step: dt.timedelta


RANGES: dict[str, Range] = {
    "hour": Range("Last hour", dt.timedelta(hours=1), "minute", dt.timedelta(minutes=1)),
    "day": Range("Last 24 hours", dt.timedelta(days=1), "minute", dt.timedelta(minutes=1)),
    "week": Range("Last 7 days", dt.timedelta(days=7), "hour", dt.timedelta(hours=1)),
    "month": Range("Last 30 days", dt.timedelta(days=30), "hour", dt.timedelta(hours=1)),
    "quarter": Range("Last 90 days", dt.timedelta(days=90), "hour", dt.timedelta(hours=1)),
}


def window(range_key: str, now: dt.datetime | None = None) -> tuple[dt.datetime, dt.datetime]:
    r = RANGES[range_key]
    now = now or timezone.now()
    step_s = int(r.step.total_seconds())
    end = dt.datetime.fromtimestamp((int(now.timestamp()) // step_s + 1) * step_s, dt.UTC)
    return end - r.span, end


def usage(gpus: list[Gpu], range_key: str, now: dt.datetime | None = None) -> dict:
    """Per-GPU series of utilisation, power and energy plus totals, from one rollup query."""
    r = RANGES[range_key]
    start, end = window(range_key, now)
    model = ROLLUPS[r.resolution]
    by_id = {g.id: g for g in gpus}
    rows = (
        model.objects.filter(gpu_id__in=list(by_id), bucket__gte=start, bucket__lt=end)
        .order_by("gpu_id", "bucket")
        .values_list("gpu_id", "bucket", "util_sum", "util_n", "power_sum_w", "power_n",
                     "energy_j", "samples", "simulated_samples")
    )
    series: dict[int, dict] = {}
    util_sum = util_n = power_sum = power_n = 0.0
    energy_j = 0.0
    simulated = measured = 0
    for gpu_id, bucket, u_sum, u_n, p_sum, p_n, e_j, n, sim in rows.iterator(chunk_size=5000):
        s = series.get(gpu_id)
        if s is None:
            g = by_id[gpu_id]
            s = series[gpu_id] = {
                "gpu_id": gpu_id, "host": g.host.name, "host_id": g.host_id, "gpu_index": g.index,
                "gpu_name": g.name, "t": [], "util_pct": [], "power_w": [], "energy_kwh": [],
                "simulated": False,
            }
        s["t"].append(bucket.isoformat())
        s["util_pct"].append(round(u_sum / u_n, 2) if u_n else None)
        s["power_w"].append(round(p_sum / p_n, 1) if p_n else None)
        s["energy_kwh"].append(e_j / J_PER_KWH)
        s["simulated"] = s["simulated"] or sim > 0
        util_sum += u_sum
        util_n += u_n
        power_sum += p_sum
        power_n += p_n
        energy_j += e_j
        simulated += sim
        measured += n - sim
    return {
        "range": range_key,
        "label": r.label,
        "resolution": r.resolution,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "totals": {
            "gpus": len(gpus),
            "gpus_reporting": len(series),
            "energy_kwh": energy_j / J_PER_KWH,
            "avg_util_pct": util_sum / util_n if util_n else None,
            "avg_power_w": power_sum / power_n if power_n else None,
            "simulated_samples": simulated,
            "measured_samples": measured,
        },
        "series": sorted(series.values(), key=lambda s: (s["host"], s["gpu_index"])),
    }


def team_gpus(team: Team) -> list[Gpu]:
    return list(Gpu.objects.filter(host__team=team).select_related("host"))


def team_usage(team: Team, range_key: str, now: dt.datetime | None = None) -> dict:
    return {"team": team.slug, **usage(team_gpus(team), range_key, now)}


def host_usage(host: Host, range_key: str, now: dt.datetime | None = None) -> dict:
    return usage(list(host.gpus.select_related("host")), range_key, now)
