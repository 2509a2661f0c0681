"""Host activity from the agent (collectors/host_activity.py): validation and storage.

``POST /api/v1/host-samples`` carries a columnar batch -- ``ts``, ``interval_s`` (the seconds
the reading covers, ending at ``ts``), ``cpu_util_pct``, ``net_rx_bytes_s``,
``net_tx_bytes_s``, ``disk_read_bytes_s``, ``disk_write_bytes_s`` (null = not readable) -- and,
now and then, a snapshot of who holds each GPU (``processes``). Rows are keyed by (host, ts),
so a replayed batch stores nothing twice; the touched hours are rebuilt from raw rows (a few
rows per host per minute: small enough to write in the request, as host energy is).
"""

from __future__ import annotations

import datetime as dt
import time

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Max, Q, Sum
from django.db.models.functions import TruncHour

from greenops.errors import invalid
from greenops.telemetry import pod_hours
from greenops.telemetry.models import Gpu, GpuProcess, Host, HostHour, HostSample
from greenops.telemetry.wire import (
    check_range,
    distinct_timestamps,
    json_int,
    numeric_column,
    parse_batch_id,
    sample_columns,
    text_field,
)
from greenops.windows import floor_hour

# Plausibility bounds: 8 x 400 GbE is 4e11 B/s; an NVMe array a few 1e10 B/s.
FLOAT_FIELDS: dict[str, tuple[float, float]] = {
    "cpu_util_pct": (0.0, 100.0),
    "net_rx_bytes_s": (0.0, 1e12),
    "net_tx_bytes_s": (0.0, 1e12),
    "disk_read_bytes_s": (0.0, 1e12),
    "disk_write_bytes_s": (0.0, 1e12),
}
COLUMNS = ("ts", "interval_s", *FLOAT_FIELDS)
MAX_PROCESSES = 512
_TEXT = {"name": 128, "namespace": 253, "pod": 253, "container": 253}
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _stamp(t: float) -> dt.datetime:
    return EPOCH + dt.timedelta(microseconds=round(t * 1e6))


def parse(doc, host: Host, *, now_s: float | None = None) -> tuple[list[HostSample], dict | None]:
    """Validate the whole batch (raise FieldError naming the first bad field)."""
    now_s = time.time() if now_s is None else now_s
    if not isinstance(doc, dict):
        raise invalid("", "the batch must be a JSON object")
    parse_batch_id(doc)
    text_field(doc, "agent_version", 32)
    samples, n = sample_columns(doc, COLUMNS, settings.INGEST_MAX_SAMPLES)
    ts = distinct_timestamps(samples["ts"], n, now_s, settings.INGEST_MAX_AGE_S,
                             settings.INGEST_MAX_FUTURE_S)
    interval = numeric_column("interval_s", samples["interval_s"], nullable=False, integer=False)
    bad = (interval <= 0) | (interval > 3600)
    if bad.any():
        i = int(np.argmax(bad))
        raise invalid(f"samples.interval_s[{i}]", "must be more than 0 and at most 3600 s")
    floats = {}
    for name, (lo, hi) in FLOAT_FIELDS.items():
        arr = numeric_column(name, samples[name], nullable=True, integer=False)
        check_range(name, arr, lo, hi)
        floats[name] = [None if np.isnan(v) else float(v) for v in arr.tolist()]
    rows = [HostSample(host=host, ts=_stamp(t), interval_s=float(interval[i]),
                       **{name: col[i] for name, col in floats.items()})
            for i, t in enumerate(ts.tolist())]
    return rows, _processes(doc.get("processes"), host, now_s)


def _processes(snap, host: Host, now_s: float) -> dict | None:
    if snap is None:
        return None
    if not isinstance(snap, dict):
        raise invalid("processes", "must be an object {ts, gpus}")
    t = snap.get("ts")
    if type(t) not in (int, float) or not (
            now_s - settings.INGEST_MAX_AGE_S <= t <= now_s + settings.INGEST_MAX_FUTURE_S):
        raise invalid("processes.ts", "must be Unix seconds within the accepted age")
    entries = snap.get("gpus")
    if not isinstance(entries, list) or len(entries) > MAX_PROCESSES:
        raise invalid("processes.gpus", f"must be an array of at most {MAX_PROCESSES} entries")
    gpus = dict(Gpu.objects.filter(host=host).values_list("index", "id"))
    clean = []
    for i, e in enumerate(entries):
        where = f"processes.gpus[{i}]"
        if not isinstance(e, dict):
            raise invalid(where, "must be an object")
        index = json_int(e.get("gpu_index"))
        if type(index) is not int or index not in gpus:
            raise invalid(f"{where}.gpu_index", "must be a GPU index registered for this host")
        pid = json_int(e.get("pid"))
        if pid is not None and (type(pid) is not int or not 0 <= pid < 2**31):
            raise invalid(f"{where}.pid", "must be a process id or null")
        used = e.get("used_memory_mib")
        if used is not None and (type(used) not in (int, float) or not 0 <= used <= 16 * 2**20):
            raise invalid(f"{where}.used_memory_mib", "must be MiB between 0 and 16 TiB or null")
        texts = {}
        for key, limit in _TEXT.items():
            v = e.get(key)
            if v is not None and (not isinstance(v, str) or len(v) > limit or "\x00" in v):
                raise invalid(f"{where}.{key}", f"must be a string of at most {limit} "
                              "characters or null")
            texts[key] = v or ""
        if pid is None and not texts["pod"]:
            raise invalid(where, "needs a pid or a pod")
        clean.append(GpuProcess(host=host, gpu_id=gpus[index], seen_at=_stamp(t), pid=pid,
                                used_memory_mib=None if used is None else float(used), **texts))
    return {"ts": _stamp(t), "rows": clean}


def recompute_hours(host: Host, start: dt.datetime, end: dt.datetime) -> None:
    """Rebuild the host's hours in [start, end) from raw rows (idempotent)."""
    both_net = Q(net_rx_bytes_s__isnull=False, net_tx_bytes_s__isnull=False)
    both_disk = Q(disk_read_bytes_s__isnull=False, disk_write_bytes_s__isnull=False)
    secs = F("interval_s")
    hours = (
        HostSample.objects.filter(host=host, ts__gte=start, ts__lt=end)
        .annotate(b=TruncHour("ts")).values("b")
        .annotate(
            n=Count("ts"), cpu_s=Sum("interval_s", filter=Q(cpu_util_pct__isnull=False)),
            cpu_busy=Sum(F("cpu_util_pct") * secs / 100.0), cpu_max=Max("cpu_util_pct"),
            net_s=Sum("interval_s", filter=both_net),
            rx=Sum(F("net_rx_bytes_s") * secs, filter=both_net),
            tx=Sum(F("net_tx_bytes_s") * secs, filter=both_net),
            rx_max=Max("net_rx_bytes_s"), tx_max=Max("net_tx_bytes_s"),
            disk_s=Sum("interval_s", filter=both_disk),
            rd=Sum(F("disk_read_bytes_s") * secs, filter=both_disk),
            wr=Sum(F("disk_write_bytes_s") * secs, filter=both_disk),
            rd_max=Max("disk_read_bytes_s"), wr_max=Max("disk_write_bytes_s"),
        )
    )
    objs = [
        HostHour(host=host, bucket=h["b"], samples=h["n"], cpu_s=h["cpu_s"] or 0.0,
                 cpu_busy_s=h["cpu_busy"] or 0.0, cpu_util_max=h["cpu_max"],
                 net_s=h["net_s"] or 0.0, net_rx_bytes=h["rx"] or 0.0,
                 net_tx_bytes=h["tx"] or 0.0, net_rx_max_bytes_s=h["rx_max"],
                 net_tx_max_bytes_s=h["tx_max"], disk_s=h["disk_s"] or 0.0,
                 disk_read_bytes=h["rd"] or 0.0, disk_write_bytes=h["wr"] or 0.0,
                 disk_read_max_bytes_s=h["rd_max"], disk_write_max_bytes_s=h["wr_max"])
        for h in hours
    ]
    fields = [f.name for f in HostHour._meta.concrete_fields
              if f.name not in ("host", "bucket") and not f.primary_key]
    HostHour.objects.bulk_create(objs, update_conflicts=True,
                                 unique_fields=["host_id", "bucket"], update_fields=fields)


def store(host: Host, rows: list[HostSample], snapshot: dict | None) -> int:
    """Write the rows (replays are no-ops), rebuild the touched hours, and replace the host's
    process list with the snapshot unless a newer one is already stored."""
    lo, hi = min(r.ts for r in rows), max(r.ts for r in rows)
    in_range = HostSample.objects.filter(host=host, ts__gte=lo, ts__lte=hi)
    with transaction.atomic():
        before = in_range.count()
        HostSample.objects.bulk_create(rows, ignore_conflicts=True, batch_size=1000)
        inserted = in_range.count() - before
        if inserted:
            recompute_hours(host, floor_hour(lo), floor_hour(hi) + dt.timedelta(hours=1))
        if snapshot is not None:
            pod_hours.one_snapshot_at_a_time(host)
            current = GpuProcess.objects.filter(host=host)
            newest = current.aggregate(t=Max("seen_at"))["t"]
            if newest is None or snapshot["ts"] > newest:
                if newest is not None:  # the older snapshot's pods held their GPUs until now
                    pod_hours.credit(host, list(current), newest, snapshot["ts"])
                current.delete()
                GpuProcess.objects.bulk_create(snapshot["rows"])
    return inserted


def accept(host: Host, doc) -> dict:
    rows, snapshot = parse(doc, host)
    inserted = store(host, rows, snapshot)
    return {"batch_id": str(doc["batch_id"]), "status": "stored" if inserted else "duplicate",
            "samples": len(rows), "inserted": inserted}


# --- what the host page shows -----------------------------------------------------------------


def activity(host: Host, since: dt.datetime) -> dict:
    """The host's CPU, network and disk since ``since`` (whole hours from HostHour), each mean
    over the seconds it was measured; None where nothing was reported."""
    a = HostHour.objects.filter(host=host, bucket__gte=since).aggregate(
        cpu_s=Sum("cpu_s"), busy=Sum("cpu_busy_s"), cpu_max=Max("cpu_util_max"),
        net_s=Sum("net_s"), rx=Sum("net_rx_bytes"), tx=Sum("net_tx_bytes"),
        disk_s=Sum("disk_s"), rd=Sum("disk_read_bytes"), wr=Sum("disk_write_bytes"))

    def mean(total, seconds, scale=1.0):
        return total / seconds * scale if seconds else None

    return {
        "cpu_util_pct": mean(a["busy"], a["cpu_s"], 100.0), "cpu_util_max": a["cpu_max"],
        "net_rx_mb_s": mean(a["rx"], a["net_s"], 1e-6),
        "net_tx_mb_s": mean(a["tx"], a["net_s"], 1e-6),
        "disk_read_mb_s": mean(a["rd"], a["disk_s"], 1e-6),
        "disk_write_mb_s": mean(a["wr"], a["disk_s"], 1e-6),
        "measured": _duration(max(a["cpu_s"] or 0.0, a["net_s"] or 0.0, a["disk_s"] or 0.0)),
    }


def _duration(seconds: float) -> str:
    """'45 s', '12 min', '23.5 h'; '' for nothing measured."""
    if seconds <= 0:
        return ""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def processes_by_gpu(host: Host) -> dict[int, list[GpuProcess]]:
    """GPU id -> who held it at the host's latest process snapshot."""
    out: dict[int, list[GpuProcess]] = {}
    for p in GpuProcess.objects.filter(host=host):
        out.setdefault(p.gpu_id, []).append(p)
    return out
