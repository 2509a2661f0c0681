"""The worker reads a stored batch back without checking it again (wire.parse_validated): it must
build exactly the Batch the API's full check built, nulls, absent optional columns and all, and a
body the API would not have stored still gets the full check's 4xx-style error (never a crash
that fails a whole group)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from greenops.errors import FieldError
from greenops.telemetry import ingest, wire

NOW_S = 1_780_000_000.0


def stored_doc() -> dict:
    # Two GPUs, two ticks, tick-major as the agent sends: (ts, gpu) = (t0, 0), (t0, 1),
    # (t0 + 1, 0), (t0 + 1, 1). energy_mj null for GPU 1's first reading (no counter),
    # energy_method null for the first tick (nothing to diff against), mem_util_pct sent with a
    # null, throttle_reasons sent with a null, every other optional column absent.
    t0 = NOW_S - 120.5
    return {
        "batch_id": "0b7f3c52-9d1e-4c55-8d0e-3f1a2b4c5d6e", "agent_version": "0.9.1",
        "sent_at": NOW_S, "source": "nvml",
        "samples": {
            "ts": [t0, t0, t0 + 1, t0 + 1],
            "gpu_index": [0, 1, 0, 1],
            "util_pct": [97, 3.5, 100, 0],
            "mem_used_mib": [80_000, 512.0, 80_100, 512.0],
            "power_w": [612.25, 71.0, 640.5, 70.75],
            "energy_mj": [7_000_000_000, None, 7_000_640_500, 9_000_070_750],
            "energy_j": [None, None, 640.5, None],
            "energy_method": [None, None, "counter", "power"],
            "temp_c": [71, 38, 72, 38],
            "sm_clock_mhz": [1980, 345, 1980, 345],
            "mem_util_pct": [41.0, None, 43.0, 0.0],
            "throttle_reasons": [4, 0, None, 0],
        },
    }


def test_a_stored_batch_reads_back_as_the_api_checked_it():
    doc = stored_doc()
    checked = wire.parse_batch(doc, now_s=NOW_S, max_samples=100, max_future_s=300,
                               max_age_s=86400)
    fast = wire.parse_validated(doc)
    assert (fast.batch_id, fast.agent_version, fast.source, fast.n) == (
        checked.batch_id, checked.agent_version, "nvml", 4)
    # ts in µs: (1,780,000,000 - 120.5) s = 1,779,999,879.5 s = 1,779,999,879,500,000 µs.
    assert fast.ts_us.tolist() == [1_779_999_879_500_000, 1_779_999_879_500_000,
                                   1_779_999_880_500_000, 1_779_999_880_500_000]
    assert fast.gpu_index.tolist() == [0, 1, 0, 1]
    # A null energy_mj is stored as 0 with its mask set; methods map None/counter/power to 0/1/2.
    assert fast.energy_mj.tolist() == [7_000_000_000, 0, 7_000_640_500, 9_000_070_750]
    assert fast.energy_mj_null.tolist() == [False, True, False, False]
    assert fast.energy_method.tolist() == [0, 0, 1, 2]
    assert fast.throttle_reasons.tolist() == [4, 0, 0, 0]
    assert fast.throttle_null.tolist() == [False, False, True, False]
    assert fast.floats["util_pct"].tolist() == [97.0, 3.5, 100.0, 0.0]
    assert [math.isnan(v) for v in fast.floats["mem_util_pct"]] == [False, True, False, False]
    assert np.isnan(fast.floats["nvlink_tx_kib_s"]).all()  # absent: unknown for every sample
    # Column for column, type for type, what the full check gives (what the worker used to use).
    assert list(fast.floats) == list(checked.floats)
    for name, arr in checked.floats.items():
        assert fast.floats[name].dtype == arr.dtype
        np.testing.assert_array_equal(fast.floats[name], arr)
    for name in ("ts_us", "gpu_index", "energy_mj", "energy_mj_null", "energy_method",
                 "throttle_reasons", "throttle_null"):
        assert getattr(fast, name).dtype == getattr(checked, name).dtype, name
        np.testing.assert_array_equal(getattr(fast, name), getattr(checked, name))


def test_without_optional_columns_they_read_back_as_unknown():
    doc = stored_doc()
    del doc["samples"]["mem_util_pct"], doc["samples"]["throttle_reasons"]
    fast = wire.parse_validated(doc)
    assert np.isnan(fast.floats["mem_util_pct"]).all()
    assert fast.throttle_null.tolist() == [True] * 4


@pytest.mark.parametrize("body", [{}, {"samples": []}, {"batch_id": "x", "samples": {"ts": [1]}}])
def test_a_body_the_api_would_not_have_stored_gets_the_full_check(body):
    # The worker marks such a batch failed with the message (FieldError), as before; a KeyError
    # or TypeError escaping here would abort the whole group's transaction instead.
    with pytest.raises(FieldError):
        ingest._parse_stored(body)
