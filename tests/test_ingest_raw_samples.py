"""Raw samples are stored as sent, nulls included: a GPU without NVML's energy counter keeps a
NULL counter (not 0 mJ), and the first sample of a GPU keeps a NULL energy method.

Found by mutation testing (tests/mutation/SURVIVORS.md): no test read the raw columns back, so
the null masks of the PostgreSQL COPY stream could be dropped or inverted unnoticed. The raw
samples are what an audit of a figure goes back to.
"""

from __future__ import annotations

import pytest

from greenops.telemetry.models import EnergyMethod, GpuSample
from tests.conftest import make_batch


@pytest.mark.django_db
def test_raw_columns_keep_their_nulls_and_methods(host, post_batch):
    h, token = host
    doc = make_batch(n_per_gpu=3)  # GPU 0 then GPU 1, 3 samples each, 1 s apart
    cols = doc["samples"]
    # GPU 1 has no energy counter (pre-Volta): energy_mj null, energy from integrated power.
    for i in range(3, 6):
        cols["energy_mj"][i] = None
        if cols["energy_method"][i] is not None:
            cols["energy_method"][i] = "power"
    assert post_batch(token, doc).status_code == 202
    rows = {(s.gpu.index, round(s.ts.timestamp() - cols["ts"][0])): s
            for s in GpuSample.objects.filter(gpu__host=h).select_related("gpu")}
    assert len(rows) == 6
    # GPU 0: counter 1,000,000 mJ then + 200 W x 1 s per step (make_batch); methods None (first
    # sample: no interval), then "counter".
    assert [rows[0, i].energy_mj for i in range(3)] == [1_000_000, 1_200_000, 1_400_000]
    assert [rows[0, i].energy_method for i in range(3)] == [
        None, EnergyMethod.COUNTER, EnergyMethod.COUNTER]
    assert [rows[0, i].energy_j for i in range(3)] == [None, 200.0, 200.0]
    # GPU 1: no counter at all -- NULL, never 0 mJ -- and "power" after its first sample.
    assert [rows[1, i].energy_mj for i in range(3)] == [None, None, None]
    assert [rows[1, i].energy_method for i in range(3)] == [
        None, EnergyMethod.POWER, EnergyMethod.POWER]
    assert [rows[1, i].energy_j for i in range(3)] == [None, 210.0, 210.0]
    assert all(rows[k].util_pct == 50.0 + k[0] and rows[k].temp_c == 60.0 for k in rows)
