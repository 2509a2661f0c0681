"""Accelerators as pages name them (issue 33): each device's energy over a period and how it
was measured, read from the hour rollups and each device's latest raw samples.

The energy of a device is the sum of its hour rollups over the period (whole finished hours);
how it was measured is named from the methods of its latest samples in the period: the
device's own energy counter (NVML, dcgm-exporter, amd-smi's accumulator) or integrated power
(Neuron devices and Jetson modules have no counter; a counter that reset falls back to it for
one interval). A device without samples in the period has no figure: unknown, not 0.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Sum

from greenops import windows
from greenops.telemetry.models import EnergyMethod, Gpu, GpuHour, GpuSample
from greenops.units import j_to_kwh, j_to_wh

RECENT = 60  # samples whose methods name how a device's energy was measured


def method_words(methods: set[int]) -> str | None:
    """How a page says where a device's energy came from, from the methods of its recent
    samples: a counter, integrated power, or a counter with power across its resets."""
    counter = bool(methods & {EnergyMethod.COUNTER, EnergyMethod.COUNTER_GAP})
    power = EnergyMethod.POWER in methods
    if counter and power:
        return "hardware energy counter; integrated power across its resets"
    if counter:
        return "hardware energy counter"
    if power:
        return "integrated power (no counter)"
    return None


def device_energy(gpus: Iterable[Gpu], window: windows.Window) -> dict[int, dict]:
    """Per device id: {"energy_j", "energy_kwh", "method", "reason"}; the energy None with the
    reason when the device has no samples in the window."""
    gpus = list(gpus)
    ids = [g.id for g in gpus]
    sums = {
        row["gpu_id"]: row
        for row in GpuHour.objects.filter(
            gpu_id__in=ids,
            bucket__gte=window.start,
            bucket__lt=window.end,
        )
        .values("gpu_id")
        .annotate(energy=Sum("energy_j"), n=Sum("samples"))
    }
    out = {}
    for g in gpus:
        row = sums.get(g.id)
        if not row or not row["n"]:
            out[g.id] = {
                "energy_j": None,
                "energy_kwh": None,
                "energy_wh": None,
                "method": None,
                "reason": f"no samples in {window.text}",
            }
            continue
        # The newest RECENT samples' methods, newest first through the (gpu, ts) primary key:
        # bounded, where "does the period hold a counter sample" would scan the period.
        methods = set(
            GpuSample.objects.filter(
                gpu_id=g.id, ts__gte=window.start, ts__lt=window.end, energy_method__isnull=False
            )
            .order_by("-ts")
            .values_list("energy_method", flat=True)[:RECENT]
        )
        method = method_words(methods)
        out[g.id] = {
            "energy_j": row["energy"],
            "energy_kwh": j_to_kwh(row["energy"]),
            "energy_wh": j_to_wh(row["energy"]),
            "method": method,
            "reason": "" if method else "no interval energy reported",
        }
    return out
