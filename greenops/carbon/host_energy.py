"""Host CPU and RAM energy from the agent (measured with codecarbon): validation and storage.

The wire format is specified in greenops/carbon/api.py. Batches are small (one row per host per
measurement interval, against one row per GPU per second for GPU samples), so they are written in
the request instead of through a queue. Raw rows are keyed by (host, ts), so a replayed batch
stores nothing twice, and the touched hours are recomputed from raw rows, which keeps
HostEnergyHour exact however often a batch arrives.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from dataclasses import dataclass

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max, Min, Q, Sum
from django.db.models.functions import Coalesce, TruncHour

from greenops.carbon.models import HostEnergySample
from greenops.errors import invalid
from greenops.telemetry import late
from greenops.telemetry.models import MIXED, Host, HostEnergyHour
from greenops.telemetry.wire import (
    check_range,
    distinct_timestamps,
    numeric_column,
    parse_batch_id,
    sample_columns,
    text_field,
)
from greenops.windows import floor_hour

SOURCES = ("codecarbon", "simulated")
TRACKING_MODES = ("machine", "process")
# How codecarbon obtained a figure. "rapl" is its intel_rapl mode (Linux powercap counters);
# "tdp"/"constant" use the CPU model's TDP from codecarbon's cpu_power.csv (or its fallback);
# "cpu_load" scales TDP by utilisation (codecarbon 3.x); "model" is its RAM estimate from
# installed memory.
CPU_METHODS = ("rapl", "powermetrics", "intel_power_gadget", "windows_emi", "cpu_load", "tdp",
               "constant", "simulated")
RAM_METHODS = ("rapl", "model", "constant", "simulated")
# Plausibility bounds: a 4-socket server draws under 5 kW of CPU; one interval is at most an hour.
FLOAT_FIELDS: dict[str, tuple[float, float]] = {
    "cpu_power_w": (0.0, 5_000.0),
    "cpu_energy_j": (0.0, 5_000.0 * 3600),
    "ram_power_w": (0.0, 2_000.0),
    "ram_energy_j": (0.0, 2_000.0 * 3600),
}
COLUMNS = ("ts", *FLOAT_FIELDS, "cpu_method", "ram_method")


@dataclass
class HostEnergyBatch:
    batch_id: uuid.UUID
    source: str
    codecarbon_version: str
    tracking_mode: str
    ts: list[dt.datetime]
    floats: dict[str, list[float | None]]
    cpu_method: list[str]
    ram_method: list[str]

    @property
    def n(self) -> int:
        return len(self.ts)


def _methods(samples: dict, name: str, allowed: tuple[str, ...]) -> list[str]:
    values = samples[name]
    for i, v in enumerate(values):
        if v not in allowed:
            raise invalid(f"samples.{name}[{i}]", f"must be one of {', '.join(allowed)}")
    return values


def parse(doc, *, now_s: float | None = None) -> HostEnergyBatch:
    """Validate a whole batch; raise FieldError naming the first bad field."""
    now_s = time.time() if now_s is None else now_s
    if not isinstance(doc, dict):
        raise invalid("", "the batch must be a JSON object")
    batch_id = parse_batch_id(doc)
    source = doc.get("source")
    if source not in SOURCES:
        raise invalid("source", f"must be one of {', '.join(SOURCES)}")
    version = text_field(doc, "codecarbon_version", 32, required=source == "codecarbon")
    mode = doc.get("tracking_mode")
    if mode not in TRACKING_MODES:
        raise invalid("tracking_mode", f"must be one of {', '.join(TRACKING_MODES)}")
    text_field(doc, "agent_version", 32)
    samples, n = sample_columns(doc, COLUMNS, settings.INGEST_MAX_SAMPLES)

    ts = distinct_timestamps(samples["ts"], n, now_s, settings.INGEST_MAX_AGE_S,
                             settings.INGEST_MAX_FUTURE_S)
    floats = {}
    for name, (lo, hi) in FLOAT_FIELDS.items():
        arr = numeric_column(name, samples[name], nullable=True, integer=False)
        check_range(name, arr, lo, hi)
        floats[name] = [None if np.isnan(v) else float(v) for v in arr.tolist()]
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    stamps = [epoch + dt.timedelta(microseconds=round(t * 1e6)) for t in ts.tolist()]
    return HostEnergyBatch(
        batch_id, source, version, mode, stamps, floats,
        _methods(samples, "cpu_method", CPU_METHODS), _methods(samples, "ram_method", RAM_METHODS),
    )


def store(host: Host, batch: HostEnergyBatch) -> int:
    """Write the samples (replays are no-ops) and refresh the touched hours; return new rows."""
    rows = [
        HostEnergySample(
            host=host, ts=batch.ts[i], cpu_method=batch.cpu_method[i],
            ram_method=batch.ram_method[i], codecarbon_version=batch.codecarbon_version,
            tracking_mode=batch.tracking_mode, simulated=batch.source == "simulated",
            **{name: col[i] for name, col in batch.floats.items()},
        )
        for i in range(batch.n)
    ]
    lo, hi = min(batch.ts), max(batch.ts)
    in_range = HostEnergySample.objects.filter(host=host, ts__gte=lo, ts__lte=hi)
    with transaction.atomic():
        before = in_range.count()
        HostEnergySample.objects.bulk_create(rows, ignore_conflicts=True, batch_size=1000)
        inserted = in_range.count() - before
        if inserted:
            start = floor_hour(lo)
            recompute_hours(host, start, floor_hour(hi) + dt.timedelta(hours=1))
            if late.is_late(lo):
                late.mark(host.team_id, lo, hi)
    return inserted


def recompute_hours(host: Host, start: dt.datetime, end: dt.datetime) -> None:
    """Rebuild the host's hours in [start, end) from raw samples (idempotent)."""
    hours = (
        HostEnergySample.objects.filter(host=host, ts__gte=start, ts__lt=end)
        .annotate(b=TruncHour("ts"))
        .values("b")
        .annotate(
            cpu=Coalesce(Sum("cpu_energy_j"), 0.0),
            ram=Coalesce(Sum("ram_energy_j"), 0.0),
            n=Count("*"),
            sim=Count("ts", filter=Q(simulated=True)),
            cpu_lo=Min("cpu_method"), cpu_hi=Max("cpu_method"),
            ram_lo=Min("ram_method"), ram_hi=Max("ram_method"),
        )
    )
    objs = [
        HostEnergyHour(
            host=host, bucket=h["b"], cpu_energy_j=h["cpu"], ram_energy_j=h["ram"],
            samples=h["n"], simulated_samples=h["sim"],
            cpu_method=h["cpu_lo"] if h["cpu_lo"] == h["cpu_hi"] else MIXED,
            ram_method=h["ram_lo"] if h["ram_lo"] == h["ram_hi"] else MIXED,
        )
        for h in hours
    ]
    HostEnergyHour.objects.bulk_create(
        objs, update_conflicts=True, unique_fields=["host_id", "bucket"],
        update_fields=["cpu_energy_j", "ram_energy_j", "samples", "simulated_samples",
                       "cpu_method", "ram_method"],
    )


def accept(host: Host, doc) -> dict:
    batch = parse(doc)
    inserted = store(host, batch)
    return {"batch_id": str(batch.batch_id), "status": "stored" if inserted else "duplicate",
            "samples": batch.n, "inserted": inserted}
