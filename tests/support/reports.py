"""Report test helpers: the October scenario's hours (Europe/Paris month edges), batches
and inference windows."""

from __future__ import annotations

import datetime as dt
import uuid

from greenops.reports.month_figures import Month

UTC = dt.UTC


S = dt.datetime(2026, 9, 30, 21, tzinfo=UTC)


H0 = dt.datetime(2026, 9, 30, 22, tzinfo=UTC)


H1 = dt.datetime(2026, 10, 15, 12, tzinfo=UTC)


H2 = dt.datetime(2026, 10, 31, 22, tzinfo=UTC)


H3 = dt.datetime(2026, 10, 31, 23, tzinfo=UTC)


OCT = Month(2026, 10)


AFTER = dt.datetime(2026, 11, 30, 12, tzinfo=UTC)  # "now" for generation: October has closed


def set_zone(team, name: str) -> None:
    team.time_zone = name
    team.save(update_fields=["time_zone"])


def hour_batch(hour: dt.datetime, util_pct: float) -> dict:
    """Wire-format v1: 60 samples of GPU 0, at hh:00:30 ... hh:59:30, 200 W, 12,000 J each."""
    ts = [(hour + dt.timedelta(seconds=60 * i + 30)).timestamp() for i in range(60)]
    cols = {"ts": ts, "gpu_index": [0] * 60, "util_pct": [util_pct] * 60,
            "mem_used_mib": [1024.0] * 60, "power_w": [200.0] * 60,
            "energy_mj": [10_000_000 + 12_000_000 * i for i in range(60)],
            "energy_j": [12_000.0] * 60, "energy_method": ["counter"] * 60,
            "temp_c": [60.0] * 60, "sm_clock_mhz": [1410.0] * 60}
    return {"batch_id": str(uuid.uuid4()), "agent_version": "0.1.0",
            "sent_at": ts[-1] + 5, "source": "nvml", "samples": cols}


def inference_doc(windows: list[tuple[dt.datetime, int]]) -> dict:
    return {"batch_id": str(uuid.uuid4()), "windows": [
        {"workload": "ranker", "start": end.timestamp() - 600, "end": end.timestamp(),
         "requests": n, "success": n,
         "failure": 0, "latency": {"unit": "ms", "le": [10, 50, 100],
                                   "counts": [n // 2, n - n // 10, n, n], "cumulative": True,
                                   "sum": 30.0 * n}}
        for end, n in windows]}
