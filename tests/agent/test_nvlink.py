"""NVLink throughput from NVML (issue 33 item 3): nvmlDeviceGetFieldValues with
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX (138/139, cumulative KiB, nvml.h) and scopeId UINT_MAX
for the sum over every link, turned into KiB/s between two reads. A board without NVLink (a
PCIe card, a single-GPU VM) answers NVML_ERROR_NOT_SUPPORTED: null, never 0, and never asked
again; a counter that went down (driver reload) and a clock that did not move give null."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from collectors.sources import NvmlSource

try:
    from tests.support.agent_fakes import NVML_ERROR_NOT_SUPPORTED, FakeNvml, NVMLError
except ImportError:  # tests/ itself on sys.path (pytest's rootdir-less import mode)
    from agent_fakes import NVML_ERROR_NOT_SUPPORTED, FakeNvml, NVMLError


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_counter_increase_over_the_time_between_reads_is_kib_per_s():
    # Each read adds 2,048,000 KiB sent and 1,024,000 KiB received; reads 2 s apart:
    # 2,048,000 / 2 = 1,024,000 KiB/s TX and 512,000 KiB/s RX.
    clock = Clock()
    src = NvmlSource(FakeNvml(n=1, nvlink_kib_per_read=(2_048_000, 1_024_000)), clock=clock)
    first = src.read(0)
    assert (first.nvlink_tx_kib_s, first.nvlink_rx_kib_s) == (None, None)  # no interval yet
    clock.t += 2.0
    r = src.read(0)
    assert (r.nvlink_tx_kib_s, r.nvlink_rx_kib_s) == (1_024_000.0, 512_000.0)
    clock.t += 0.5  # 2,048,000 / 0.5 = 4,096,000 KiB/s
    assert src.read(0).nvlink_tx_kib_s == 4_096_000.0


def test_no_nvlink_is_null_not_zero_and_not_asked_again():
    fake = FakeNvml(n=1, nvlink_kib_per_read=None)  # every field answers NOT_SUPPORTED
    clock = Clock()
    src = NvmlSource(fake, clock=clock)
    for _ in range(3):
        clock.t += 1.0
        r = src.read(0)
        assert (r.nvlink_tx_kib_s, r.nvlink_rx_kib_s) == (None, None)
    assert fake.calls["nvmlDeviceGetFieldValues"] == 1
    assert "nvlink" in src.unsupported(0)


def test_a_counter_that_went_down_is_null_then_counts_again():
    fake = FakeNvml(n=1, nvlink_kib_per_read=(1000, 1000))
    clock = Clock()
    src = NvmlSource(fake, clock=clock)
    src.read(0)  # counters 1,000 / 1,000
    clock.t += 1.0
    # A driver reload restarts the counters: the next read answers 500, below the last 1,000.
    fake.nvlink_kib[0] = [-500, -500]
    r = src.read(0)
    assert (r.nvlink_tx_kib_s, r.nvlink_rx_kib_s) == (None, None)
    clock.t += 1.0
    assert src.read(0).nvlink_tx_kib_s == 1000.0  # 500 -> 1,500 in 1 s
    clock.t += 0.0  # the same instant: no interval to divide by
    assert src.read(0).nvlink_tx_kib_s is None


class TransientField(FakeNvml):
    """One read whose RX field answers NVML_ERROR_UNKNOWN (999): transient."""

    fail_next = False

    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        out = super().nvmlDeviceGetFieldValues(handle, field_ids)
        if self.fail_next:
            self.fail_next = False
            out[1].nvmlReturn = 999
        return out


def test_a_transient_field_error_is_null_and_asked_again():
    fake = TransientField(n=1, nvlink_kib_per_read=(3000, 6000))
    clock = Clock()
    src = NvmlSource(fake, clock=clock)
    src.read(0)
    clock.t += 1.0
    fake.fail_next = True
    assert src.read(0).nvlink_rx_kib_s is None
    clock.t += 1.0
    # The failed read stored nothing: 3 reads' counters (9,000 / 18,000) against the first's
    # (3,000 / 6,000) over 2 s = 3,000 / 6,000 KiB/s.
    r = src.read(0)
    assert (r.nvlink_tx_kib_s, r.nvlink_rx_kib_s) == (3000.0, 6000.0)
    assert "nvlink" not in src.unsupported(0)


class OldPynvml(FakeNvml):
    """A pynvml whose nvmlDeviceGetFieldValues takes bare field ids (no scopeId)."""

    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        self._hit("nvmlDeviceGetFieldValues")
        for f in field_ids:
            int(f)  # a (fieldId, scopeId) tuple: TypeError, as the ctypes assignment raises
        return []


class WholeCallUnsupported(FakeNvml):
    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        self._hit("nvmlDeviceGetFieldValues")
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


@pytest.mark.parametrize("fake_class", [OldPynvml, WholeCallUnsupported])
def test_a_pynvml_or_driver_that_cannot_answer_is_null_once(fake_class):
    fake = fake_class(n=1, nvlink_kib_per_read=(1, 1))
    src = NvmlSource(fake, clock=Clock())
    assert src.read(0).nvlink_tx_kib_s is None
    assert src.read(0).nvlink_rx_kib_s is None
    assert fake.calls["nvmlDeviceGetFieldValues"] == 1
    assert "nvlink" in src.unsupported(0)
    # The other metrics keep coming.
    assert src.read(0).power_w == 250.0


class RealStructs(FakeNvml):
    """Answers with nvidia-ml-py's own c_nvmlFieldValue_t array, filled the way
    pynvml.nvmlDeviceGetFieldValues fills it, so the attribute names are upstream's."""

    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        self._hit("nvmlDeviceGetFieldValues")
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for i, (field_id, scope) in enumerate(field_ids):
            values[i].fieldId, values[i].scopeId = field_id, scope
            values[i].nvmlReturn = pynvml.NVML_SUCCESS
            values[i].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            d = field_id - pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
            self.nvlink_kib[handle][d] += self.nvlink_kib_per_read[d]
            values[i].value.ullVal = ctypes.c_ulonglong(self.nvlink_kib[handle][d]).value
        return values


def test_real_nvml_field_value_structs():
    # Counters past 2^32 KiB (4 TiB moved): 5,000,000,000 KiB a read, 10 s apart.
    clock = Clock()
    src = NvmlSource(
        RealStructs(n=1, nvlink_kib_per_read=(5_000_000_000, 2_500_000_000)), clock=clock
    )
    src.read(0)
    clock.t += 10.0
    r = src.read(0)
    assert (r.nvlink_tx_kib_s, r.nvlink_rx_kib_s) == (500_000_000.0, 250_000_000.0)
