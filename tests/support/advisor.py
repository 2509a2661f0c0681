"""Advisor test helpers: bottleneck profiles as wire batches, and the fp16/int8 variant hours."""

from __future__ import annotations

import datetime as dt
import time

from greenops.kpis.models import KpiRollup, Period
from tests.support.factories import make_batch

T0 = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)
# Distinct values (no ties), so the exact Mann-Whitney distribution applies.
FP16_J = [401_000.0, 410_000.0, 390_000.0, 405_000.0, 395_000.0, 399_000.0]  # sum 2,400,000
INT8_J = [251_000.0, 255_000.0, 245_000.0, 260_000.0, 240_000.0, 249_000.0]  # sum 1,500,000
N_GPUS = 4
N_MIN = 30  # one sample per GPU per minute for 30 minutes: 4 x 30 = 120 GPU-minutes


def profile_batch(util: float, mem_util: float | None, throttle: int | None,
                  n_min: int = N_MIN, *, gpus: int = N_GPUS, power: float | None = None,
                  limit: float = 300.0, mem_used: float | None = None,
                  pcie_rx: float | None = None, pcie_tx: float | None = None,
                  start: float | None = None, extra: dict | None = None) -> dict:
    """`gpus` GPUs, one sample a minute; make_batch's power is 200 + 10 g W, so a GPU's energy
    is (n_min - 1) intervals x 60 s x (200 + 10 g) W (the first sample has no interval).
    `power` overrides the reported power only (the energy columns stay make_batch's);
    `extra` adds columns at one value each (DCGM's profiling fields, as the agent joins them)."""
    # By default in the last finished hour: figures count whole finished hours (windows.period).
    start = (time.time() // 3600) * 3600 - 3600 if start is None else start
    doc = make_batch(n_per_gpu=n_min, gpus=range(gpus), start=start, step=60.0)
    cols = doc["samples"]
    n = len(cols["ts"])
    cols["util_pct"] = [util] * n
    if power is not None:
        cols["power_w"] = [power] * n
    if mem_used is not None:
        cols["mem_used_mib"] = [mem_used] * n
    if mem_util is not None:
        cols["mem_util_pct"] = [mem_util] * n
    if pcie_rx is not None:
        cols["pcie_rx_kib_s"] = [pcie_rx] * n
        cols["pcie_tx_kib_s"] = [pcie_tx or 0.0] * n
    for name, value in (extra or {}).items():
        cols[name] = [value] * n
    if throttle is not None:
        # Every other sample at the power cap (0x4 SwPowerCap), the rest idle-clocked (0x1).
        cols["throttle_reasons"] = [throttle if i % 2 == 0 else 0x1 for i in range(n)]
        cols["power_limit_w"] = [limit] * n
    return doc


def hours(team, wl, start: dt.datetime, energies: list[float]) -> None:
    """Hour rollups as the KPI rollup writes them: 1,000 inferences an hour over the whole
    hour, 50 % utilisation, $3.00 an hour."""
    for i, j in enumerate(energies):
        KpiRollup.objects.create(team=team, workload=wl, period=Period.HOUR,
                                 bucket=start + dt.timedelta(hours=i), requests=1000,
                                 success=1000, measured_s=3600.0, util_sum=50.0 * 60,
                                 util_n=60, gpu_minutes=60, gpu_energy_j=j, cost_usd=3.0)
