"""Ingest test helpers: stored-row counts, bottleneck columns and the peak batches that the
PostgreSQL and the embedded SQLite stores must roll up alike."""

from __future__ import annotations

from greenops.telemetry.models import GpuSample, IngestBatch
from tests.support.factories import make_batch

# Batch 1 (earlier) carries the peaks; batch 2, ten seconds later in the same minute, is lower
# on every metric. Values are what NVML reports: util %, memory MiB, power W, temperature C.
PEAK = {"util_pct": 97.0, "mem_used_mib": 39_000.0, "power_w": 385.5, "temp_c": 81.0}
QUIET = {"util_pct": 12.0, "mem_used_mib": 2_048.0, "power_w": 96.25, "temp_c": 47.0}
COLUMN_OF_ROLLUP = {"util_max": "util_pct", "mem_used_max_mib": "mem_used_mib",
                    "power_max_w": "power_w", "temp_max_c": "temp_c"}


def stored() -> tuple[int, int]:
    return GpuSample.objects.count(), IngestBatch.objects.count()


def with_bottleneck_columns(doc: dict) -> dict:
    """make_batch's 2 GPUs x 4 samples, plus the new columns (GPU 0's then GPU 1's)."""
    cols = doc["samples"]
    cols["mem_util_pct"] = [70.0, 80.0, 90.0, None, 10.0, 10.0, 20.0, 20.0]
    cols["mem_clock_mhz"] = [1215.0] * 8
    cols["pcie_tx_kib_s"] = [1000.0, 3000.0, None, 2000.0] + [0.0] * 4
    cols["pcie_rx_kib_s"] = [4000.0, 8000.0, 6000.0, 6000.0] + [0.0] * 4
    cols["throttle_reasons"] = [0x4, 0x40, 0x0, 0x1, 0x84, 0x20, None, 0x0]
    cols["power_limit_w"] = [400.0, 400.0, 350.0, 400.0] + [300.0] * 4
    return doc


def minute_start(now_s: float) -> float:
    """The start of a whole minute two minutes ago: two 5-second batches fit in that minute, so
    in the same minute, hour and day bucket (a minute never straddles an hour or a day)."""
    return (now_s // 60 - 2) * 60


def peak_batches(start: float) -> list[dict]:
    """Two batches of 5 samples per GPU for GPUs 0 and 1: the first at start+0..4 s with the
    PEAK values on the middle sample, the second at start+10..14 s with QUIET values."""
    out = []
    for offset, values in ((0.0, PEAK), (10.0, QUIET)):
        doc = make_batch(n_per_gpu=5, start=start + offset)
        cols = doc["samples"]
        for name, value in values.items():
            # Batch 1: only its third sample per GPU peaks (the others sit at 50 %, 1024 MiB,
            # 200-210 W, 60 C from make_batch), so max() has to pick it out. Batch 2: flat.
            cols[name] = [value if (offset or i % 5 == 2) else cols[name][i]
                          for i in range(len(cols[name]))]
        out.append(doc)
    return out


def lost_peaks(rows) -> list[tuple[str, int, str, float]]:
    """(rollup, GPU index, field, stored value) of every maximum that is not PEAK's: all of
    them at once, so a failure shows which of the minute, hour and day rollups lost what."""
    return [(type(r).__name__, r.gpu.index, f, getattr(r, f))
            for r in rows for f, want in expected_after_both().items()
            if getattr(r, f) is None or abs(getattr(r, f) - want) > 1e-9]


def expected_after_both() -> dict[str, float]:
    # PEAK is above every other value of either batch (QUIET and make_batch's 50-51 %, 1024 MiB,
    # 200-210 W, 60 C), so each maximum over both batches is PEAK's.
    return {rollup: PEAK[column] for rollup, column in COLUMN_OF_ROLLUP.items()}


def record_publishes(settings, monkeypatch) -> list[str]:
    """With a real broker configured (the queued-store key and coalescing on), store tasks
    recorded instead of published: returns the list the queued batch ids go to. Skips the test
    where no Redis is configured."""
    import pytest

    from greenops.telemetry import tasks

    if not settings.REDIS_URL:
        pytest.skip("needs Redis")
    settings.CELERY_TASK_ALWAYS_EAGER = False
    published: list[str] = []
    monkeypatch.setattr(tasks.store_batch, "apply_async",
                        lambda args, **kw: published.append(args[0]))
    return published
