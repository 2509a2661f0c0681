"""Writing a validated batch: raw samples plus the minute and hour rollups, exactly once.

PostgreSQL: the batch becomes a binary COPY stream built with numpy (no Python object per
sample), lands in a temporary staging table, and one statement moves it into the samples table
with ON CONFLICT DO NOTHING while folding only the rows that were really inserted into the
rollups. A replayed batch therefore changes nothing.
SQLite (the embedded default): an idempotent bulk insert, then the touched buckets are recomputed
from raw samples.
"""

from __future__ import annotations

import datetime as dt
import weakref

import numpy as np
from django.db import connection, transaction
from django.db.models import Count, Max, Q, Sum
from django.db.models.functions import Coalesce, TruncHour, TruncMinute

from greenops.telemetry.models import GpuHour, GpuMinute, GpuSample
from greenops.telemetry.wire import Batch

PG_EPOCH_OFFSET_US = 946_684_800 * 1_000_000  # 1970-01-01 -> 2000-01-01
COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
COPY_TRAILER = b"\xff\xff"

# Column order of the COPY stream and the big-endian binary type of each.
SAMPLE_COLUMNS: list[tuple[str, str]] = [
    ("gpu_id", ">i8"),
    ("ts", ">i8"),
    ("util_pct", ">f8"),
    ("mem_used_mib", ">f8"),
    ("power_w", ">f8"),
    ("energy_mj", ">i8"),
    ("energy_j", ">f8"),
    ("energy_method", ">i2"),
    ("temp_c", ">f8"),
    ("sm_clock_mhz", ">f8"),
    ("simulated", "?"),
]
COLUMN_LIST = ", ".join(name for name, _ in SAMPLE_COLUMNS)


def batch_columns(batch: Batch, gpu_ids: dict[int, int]) -> tuple[dict, dict]:
    """Native numpy columns plus null masks, with GPU indices mapped to database ids."""
    lookup = np.zeros(int(batch.gpu_index.max()) + 1, dtype=np.int64)
    for index, gpu_id in gpu_ids.items():
        if index < lookup.size:
            lookup[index] = gpu_id
    values = {
        "gpu_id": lookup[batch.gpu_index],
        "ts": batch.ts_us,
        "energy_mj": batch.energy_mj,
        "energy_method": batch.energy_method,
        "simulated": np.full(batch.n, batch.source == "simulated"),
    }
    nulls: dict[str, np.ndarray] = {
        "energy_mj": batch.energy_mj_null,
        "energy_method": batch.energy_method == 0,
    }
    for name, arr in batch.floats.items():
        values[name] = arr
        nulls[name] = np.isnan(arr)
    return values, nulls


def copy_binary(values: dict, nulls: dict, n: int) -> bytes:
    """PostgreSQL binary COPY rows, built a null-pattern at a time.

    Rows that share the same set of NULL columns have a fixed layout, so each group is one numpy
    structured array. A fleet has few patterns (a GPU model either reports a metric or not).
    """
    code = np.zeros(n, dtype=np.int64)
    for bit, (name, _) in enumerate(SAMPLE_COLUMNS):
        mask = nulls.get(name)
        if mask is not None:
            code |= mask.astype(np.int64) << bit
    parts = [COPY_HEADER]
    for pattern in np.unique(code):
        sel = code == pattern
        fields: list[tuple[str, str]] = [("nfields", ">i2")]
        for bit, (name, dtype) in enumerate(SAMPLE_COLUMNS):
            fields.append((name + "__len", ">i4"))
            if not (pattern >> bit) & 1:
                fields.append((name, dtype))
        rows = np.empty(int(sel.sum()), dtype=np.dtype(fields))
        rows["nfields"] = len(SAMPLE_COLUMNS)
        for bit, (name, dtype) in enumerate(SAMPLE_COLUMNS):
            if (pattern >> bit) & 1:
                rows[name + "__len"] = -1
            else:
                rows[name + "__len"] = np.dtype(dtype).itemsize
                column = values[name][sel]
                rows[name] = column - PG_EPOCH_OFFSET_US if name == "ts" else column
        parts.append(rows.tobytes())
    parts.append(COPY_TRAILER)
    return b"".join(parts)


_ROLLUP_INSERT = """
    INSERT INTO {table} AS r (gpu_id, bucket, samples, util_sum, util_n, util_max, power_sum_w,
        power_n, power_max_w, mem_used_max_mib, temp_max_c, energy_j, simulated_samples)
    SELECT gpu_id, date_trunc('{unit}', ts), count(*), coalesce(sum(util_pct), 0),
        count(util_pct), max(util_pct), coalesce(sum(power_w), 0), count(power_w), max(power_w),
        max(mem_used_mib), max(temp_c), coalesce(sum(energy_j), 0),
        count(*) FILTER (WHERE simulated)
    FROM ins GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (gpu_id, bucket) DO UPDATE SET
        samples = r.samples + excluded.samples,
        util_sum = r.util_sum + excluded.util_sum,
        util_n = r.util_n + excluded.util_n,
        util_max = greatest(r.util_max, excluded.util_max),
        power_sum_w = r.power_sum_w + excluded.power_sum_w,
        power_n = r.power_n + excluded.power_n,
        power_max_w = greatest(r.power_max_w, excluded.power_max_w),
        mem_used_max_mib = greatest(r.mem_used_max_mib, excluded.mem_used_max_mib),
        temp_max_c = greatest(r.temp_max_c, excluded.temp_max_c),
        energy_j = r.energy_j + excluded.energy_j,
        simulated_samples = r.simulated_samples + excluded.simulated_samples
    RETURNING 1
"""

_PG_MOVE = f"""
WITH ins AS (
    INSERT INTO telemetry_gpusample ({COLUMN_LIST})
    SELECT {COLUMN_LIST} FROM gpusample_stage
    ON CONFLICT DO NOTHING
    RETURNING gpu_id, ts, util_pct, power_w, mem_used_mib, temp_c, energy_j, simulated
), m AS ({_ROLLUP_INSERT.format(table="telemetry_gpuminute", unit="minute")}
), h AS ({_ROLLUP_INSERT.format(table="telemetry_gpuhour", unit="hour")}
)
SELECT count(*) FROM ins
"""


def store_batch(batch: Batch, gpu_ids: dict[int, int]) -> int:
    """Store a batch and fold it into the rollups; return how many samples were new."""
    values, nulls = batch_columns(batch, gpu_ids)
    if connection.vendor == "postgresql":
        return _store_postgres(values, nulls, batch.n)
    return _store_generic(values, nulls, batch.n)


# Database connections (psycopg's, so a reconnect starts afresh) whose session is known to have
# the staging table: the worker keeps its connection across tasks, and skipping the CREATE saves
# a round trip and a catalog lookup per batch.
_staged_connections: weakref.WeakSet = weakref.WeakSet()


def prepare_session() -> None:
    """Create the session's staging table ahead of the batch's transaction (the worker calls
    this outside any transaction, so the table then lasts as long as the connection)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            _ensure_stage(cursor)


def _ensure_stage(cursor) -> None:
    raw = connection.connection
    if raw in _staged_connections:
        return
    cursor.execute(
        "CREATE TEMP TABLE IF NOT EXISTS gpusample_stage "
        "(LIKE telemetry_gpusample INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
    )
    # Inside a transaction a rollback could still take the CREATE with it: remember only
    # tables created in autocommit mode.
    if not connection.in_atomic_block:
        _staged_connections.add(raw)


def _store_postgres(values: dict, nulls: dict, n: int) -> int:
    payload = copy_binary(values, nulls, n)
    with transaction.atomic(), connection.cursor() as cursor:
        _ensure_stage(cursor)
        with cursor.copy(f"COPY gpusample_stage ({COLUMN_LIST}) FROM STDIN (FORMAT BINARY)") as cp:
            cp.write(payload)
        cursor.execute(_PG_MOVE)
        return cursor.fetchone()[0]


def _to_datetime(us: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=int(us))


def _store_generic(values: dict, nulls: dict, n: int) -> int:
    names = [name for name, _ in SAMPLE_COLUMNS]
    columns = []
    for name in names:
        col = values[name].tolist()
        mask = nulls.get(name)
        if mask is not None and mask.any():
            col = [None if m else v for v, m in zip(col, mask.tolist(), strict=True)]
        columns.append(col)
    objs = []
    for row in zip(*columns, strict=True):
        fields = dict(zip(names, row, strict=True))
        fields["ts"] = _to_datetime(fields["ts"])
        objs.append(GpuSample(**fields))
    gpu_ids = sorted(set(values["gpu_id"].tolist()))
    lo, hi = int(values["ts"].min()), int(values["ts"].max())
    with transaction.atomic():
        before = GpuSample.objects.filter(
            gpu_id__in=gpu_ids, ts__gte=_to_datetime(lo), ts__lte=_to_datetime(hi)
        ).count()
        GpuSample.objects.bulk_create(objs, ignore_conflicts=True, batch_size=500)
        after = GpuSample.objects.filter(
            gpu_id__in=gpu_ids, ts__gte=_to_datetime(lo), ts__lte=_to_datetime(hi)
        ).count()
        for model, trunc, step in ((GpuMinute, TruncMinute, 60), (GpuHour, TruncHour, 3600)):
            start = _to_datetime(lo - lo % (step * 1_000_000))
            end = _to_datetime(hi - hi % (step * 1_000_000) + step * 1_000_000)
            recompute_rollup(model, trunc, gpu_ids, start, end)
    return after - before


def recompute_rollup(
    model, trunc, gpu_ids: list[int], start: dt.datetime, end: dt.datetime
) -> None:
    """Rebuild the buckets in [start, end) for these GPUs from raw samples (idempotent)."""
    rows = (
        GpuSample.objects.filter(gpu_id__in=gpu_ids, ts__gte=start, ts__lt=end)
        .annotate(b=trunc("ts"))
        .values("gpu_id", "b")
        .annotate(
            samples=Count("*"),
            util_sum=Coalesce(Sum("util_pct"), 0.0),
            util_n=Count("util_pct"),
            util_max=Max("util_pct"),
            power_sum_w=Coalesce(Sum("power_w"), 0.0),
            power_n=Count("power_w"),
            power_max_w=Max("power_w"),
            mem_used_max_mib=Max("mem_used_mib"),
            temp_max_c=Max("temp_c"),
            energy_j=Coalesce(Sum("energy_j"), 0.0),
            simulated_samples=Count("ts", filter=Q(simulated=True)),
        )
    )
    objs = [model(gpu_id=r.pop("gpu_id"), bucket=r.pop("b"), **r) for r in rows]
    model.objects.bulk_create(
        objs,
        update_conflicts=True,
        unique_fields=["gpu_id", "bucket"],
        update_fields=[
            "samples", "util_sum", "util_n", "util_max", "power_sum_w", "power_n", "power_max_w",
            "mem_used_max_mib", "temp_max_c", "energy_j", "simulated_samples",
        ],
    )
