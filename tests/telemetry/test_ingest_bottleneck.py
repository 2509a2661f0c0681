"""Bottleneck metrics (issue 14) from the agent's NVML reads through the wire, the COPY path
(and SQLite's), into the minute/hour/day rollups the advisor reads.

Numbers are written as NVML gives them: utilization.memory in %, PCIe throughput in KB/s,
clocks in MHz, the enforced power limit in mW, throttle reasons as the nvmlClocksThrottleReason
bitmask (0x1 GpuIdle, 0x4 SwPowerCap, 0x20 SwThermalSlowdown, 0x40 HwThermalSlowdown, 0x80
HwPowerBrakeSlowdown).
"""

from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest

from collectors.batch import FIELDS, PROFILE_FIELDS, SampleBuffer
from collectors.sources import NvmlSource
from greenops.telemetry.models import GpuDay, GpuHour, GpuMinute, GpuSample
from tests.support import ROOT
from tests.support.agent_fakes import FakeNvml
from tests.support.embedded import embedded_env
from tests.support.factories import make_batch
from tests.support.telemetry import minute_start, with_bottleneck_columns


@pytest.mark.django_db
def test_new_metrics_reach_raw_samples_and_every_rollup(host, post_batch):
    h, token = host
    doc = with_bottleneck_columns(make_batch(n_per_gpu=4, start=minute_start(time.time())))
    assert post_batch(token, doc).status_code == 202
    raw = GpuSample.objects.filter(gpu__host=h, gpu__index=0).order_by("ts")
    assert [s.throttle_reasons for s in raw] == [4, 64, 0, 1]
    assert [s.mem_util_pct for s in raw] == [70.0, 80.0, 90.0, None]  # null stays null
    for model in (GpuMinute, GpuHour, GpuDay):
        g0 = model.objects.get(gpu__host=h, gpu__index=0)
        # memory util: 70 + 80 + 90 = 240 over 3 reported samples (the null is not a 0).
        assert (g0.mem_util_sum, g0.mem_util_n) == (240.0, 3)
        # PCIe: only samples with both directions: tx 1000 + 3000 + 2000 = 6000,
        # rx 4000 + 8000 + 6000 = 18000 over 3 samples (the third sample has tx null).
        assert (g0.pcie_tx_sum_kib_s, g0.pcie_rx_sum_kib_s, g0.pcie_n) == (6000.0, 18000.0, 3)
        # Throttle: 4 reported; 0x4 is the power cap, 0x40 thermal, 0x0/0x1 neither.
        assert (g0.throttle_n, g0.power_capped_samples, g0.thermal_samples) == (4, 1, 1)
        assert g0.power_limit_min_w == 350.0
        g1 = model.objects.get(gpu__host=h, gpu__index=1)
        # 0x84 = power cap + power brake (one sample, counted once); 0x20 SW thermal; one null.
        assert (g1.throttle_n, g1.power_capped_samples, g1.thermal_samples) == (3, 1, 1)
        assert (g1.mem_util_sum, g1.mem_util_n) == (60.0, 4)

    # A replay changes nothing; a second batch in the same minute adds to the sums.
    assert post_batch(token, doc).status_code == 202
    later = with_bottleneck_columns(make_batch(n_per_gpu=4, start=minute_start(time.time()) + 10))
    assert post_batch(token, later).status_code == 202
    g0 = GpuMinute.objects.get(gpu__host=h, gpu__index=0)
    assert (g0.mem_util_sum, g0.mem_util_n, g0.throttle_n, g0.power_capped_samples) == (
        480.0, 6, 8, 2)


@pytest.mark.django_db
def test_an_agent_without_the_new_columns_stores_unknown_not_zero(host, post_batch):
    h, token = host
    assert post_batch(token, make_batch(n_per_gpu=3)).status_code == 202
    assert GpuSample.objects.filter(gpu__host=h, throttle_reasons__isnull=False).count() == 0
    m = GpuMinute.objects.filter(gpu__host=h).first()
    assert (m.mem_util_n, m.pcie_n, m.throttle_n, m.power_limit_min_w) == (0, 0, 0, None)


@pytest.mark.django_db
@pytest.mark.parametrize("column, value, field", [
    ("mem_util_pct", 101.0, "samples.mem_util_pct[2]"),
    ("pcie_rx_kib_s", -1.0, "samples.pcie_rx_kib_s[2]"),
    ("throttle_reasons", -4, "samples.throttle_reasons[2]"),
    ("throttle_reasons", 2**32, "samples.throttle_reasons[2]"),
    ("throttle_reasons", 4.5, "samples.throttle_reasons[2]"),
])
def test_bad_bottleneck_values_are_refused_by_name_and_nothing_is_stored(
        host, post_batch, column, value, field):
    h, token = host
    doc = with_bottleneck_columns(make_batch(n_per_gpu=4))
    doc["samples"][column][2] = value
    r = post_batch(token, doc)
    assert r.status_code == 422, r.content
    assert r.json()["field"] == field
    assert GpuSample.objects.filter(gpu__host=h).count() == 0


@pytest.mark.django_db
def test_a_short_optional_column_is_refused(host, post_batch):
    _, token = host
    doc = with_bottleneck_columns(make_batch(n_per_gpu=4))
    doc["samples"]["pcie_tx_kib_s"].pop()
    r = post_batch(token, doc)
    assert r.status_code == 422 and r.json()["field"] == "samples.pcie_tx_kib_s"


def test_nvml_source_reads_the_bottleneck_metrics():
    fake = FakeNvml(n=1, profile={"gpu": 35, "memory": 82, "pcie_tx_kb": 1500,
                                  "pcie_rx_kb": 250_000, "throttle": 0x4, "enforced_mw": 300_000})
    r = NvmlSource(lib=fake).read(0)
    assert (r.util_pct, r.mem_util_pct, r.mem_clock_mhz) == (35.0, 82.0, 1215.0)
    assert (r.pcie_tx_kib_s, r.pcie_rx_kib_s) == (1500.0, 250000.0)
    assert r.throttle_reasons == 4
    assert r.power_limit_w == 300.0  # 300,000 mW
    buf = SampleBuffer()
    buf.append(1.0, 0, r, None, None)
    cols = buf.columns()
    # The DCGM profiling columns are left out when no sample has them (NVML never does).
    assert list(cols) == [f for f in FIELDS if f not in PROFILE_FIELDS]
    assert cols["throttle_reasons"] == [4] and cols["pcie_rx_kib_s"] == [250000.0]


def test_unsupported_metrics_are_null_and_never_asked_again():
    fake = FakeNvml(n=1, unsupported={"nvmlDeviceGetPcieThroughput",
                                      "nvmlDeviceGetCurrentClocksThrottleReasons"})
    src = NvmlSource(lib=fake)
    for _ in range(3):
        r = src.read(0)
        assert (r.pcie_tx_kib_s, r.pcie_rx_kib_s, r.throttle_reasons) == (None, None, None)
        assert r.mem_util_pct == 40.0 and r.power_limit_w == 400.0  # the others still read
    # Asked once each for tx and rx, then remembered as unsupported.
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 2
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 1
    assert {"pcie_tx_kib_s", "pcie_rx_kib_s", "throttle_reasons"} <= src.unsupported(0)


def test_an_old_pynvml_without_the_functions_gives_nulls():
    class OldNvml(FakeNvml):
        nvmlDeviceGetPcieThroughput = None
        nvmlDeviceGetCurrentClocksThrottleReasons = None
        nvmlDeviceGetEnforcedPowerLimit = None

    r = NvmlSource(lib=OldNvml(n=1)).read(0)
    assert (r.pcie_tx_kib_s, r.throttle_reasons, r.power_limit_w) == (None, None, None)
    assert not math.isnan(r.util_pct)


SQLITE_CHECK = """
import django, time
django.setup()
from django.core.management import call_command
from django.db import connection
call_command("migrate", verbosity=0)
assert connection.vendor == "sqlite", connection.vendor
from greenops.teams.models import Team
from greenops.telemetry import store, wire
from greenops.telemetry.ingest import known_gpus
from greenops.telemetry.models import Gpu, GpuDay, GpuHour, GpuMinute, Host
from tests.support.factories import make_batch
from tests.support.telemetry import minute_start, with_bottleneck_columns

team = Team.objects.create(name="Embedded")
host = Host(team=team, name="h"); host.set_new_token(); host.save()
for i in (0, 1):
    Gpu.objects.create(host=host, index=i)
doc = with_bottleneck_columns(make_batch(n_per_gpu=4, start=minute_start(time.time())))
for _ in range(2):  # the replay changes nothing
    batch = wire.parse_batch(doc, now_s=time.time(), max_samples=10**6, max_future_s=300,
                             max_age_s=86400)
    store.store_batch(batch, known_gpus(host))
for model in (GpuMinute, GpuHour, GpuDay):
    g0 = model.objects.get(gpu__host=host, gpu__index=0)
    got = (g0.mem_util_sum, g0.mem_util_n, g0.pcie_tx_sum_kib_s, g0.pcie_rx_sum_kib_s, g0.pcie_n,
           g0.throttle_n, g0.power_capped_samples, g0.thermal_samples, g0.power_limit_min_w)
    assert got == (240.0, 3, 6000.0, 18000.0, 3, 4, 1, 1, 350.0), got
print("ok")
"""


def test_the_embedded_sqlite_store_rolls_up_the_same_figures(tmp_path, sqlite_migrated):
    out = subprocess.run([sys.executable, "-c", SQLITE_CHECK], cwd=ROOT,
                         env=embedded_env(tmp_path, sqlite_migrated), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("ok")
