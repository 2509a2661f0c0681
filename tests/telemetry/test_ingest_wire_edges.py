"""Edges of the agent's wire format (greenops/telemetry/wire.py), each answer worked out by hand
from the format: written for the surviving mutants of `python tests/mutation/run.py wire`
(issue 16; tests/mutation/SURVIVORS.md, section "wire"). Pure: no database, no HTTP.

Real-format input comes from the agent's own code (collectors/batch.py: SampleBuffer,
build_batch, encode -- the gzipped columnar JSON it POSTs), hostile input from the same code fed
readings a broken driver can give (NaN, infinities, negative counters) or from a payload cut
short. Every refusal is compared in full: HTTP status, error code, field path and message."""

from __future__ import annotations

import gzip
import json
import math
import tracemalloc
import uuid
import zlib

import numpy as np
import orjson
import pytest

import collectors
from collectors.batch import SampleBuffer, build_batch, encode
from collectors.sources import Reading
from greenops import request_body as body
from greenops.errors import FieldError
from greenops.telemetry import wire

NOW = 1_780_000_000.0
MAX_AGE = 30 * 86400.0
LIMITS = dict(now_s=NOW, max_samples=6, max_future_s=300.0, max_age_s=MAX_AGE)
BATCH_ID = "5f0c1a7e-3b2d-4c8e-9a61-2f4e8d7c6b5a"
NAN_MSG = "NaN and infinities are not allowed"


def refusal(fn, *args, **kwargs) -> tuple:
    """(status, code, field, message) of the FieldError fn raises."""
    with pytest.raises(FieldError) as info:
        fn(*args, **kwargs)
    e = info.value
    return e.status, e.code, e.field, e.message


def invalid(field, message) -> tuple:
    return 422, "validation_error", field, message


def server_side(payload: bytes, **limits):
    """What ingest does with a POSTed body: inflate, parse, validate."""
    doc = body.parse_json(body.decode_body(payload, True, 1 << 20))
    return wire.parse_batch(doc, **{**LIMITS, **limits})


def agent_payload(rows, source="nvml") -> bytes:
    """rows: (ts, gpu, Reading, energy_j, energy_method), as the agent's tick appends them."""
    buf = SampleBuffer()
    for ts, gpu, reading, energy_j, method in rows:
        buf.append(ts, gpu, reading, energy_j, method)
    return encode(build_batch(buf.columns(), source, batch_id=BATCH_ID))


def doc_of(n=2, **columns) -> dict:
    """A minimal valid batch of n samples of GPU 0, one a second ending 10 s before NOW, with
    the given columns replaced (a column given as None is left out)."""
    cols = {
        "ts": [NOW - 10 - (n - 1) + i for i in range(n)],
        "gpu_index": [0] * n,
        "util_pct": [50.0] * n,
        "mem_used_mib": [1024.0] * n,
        "power_w": [200.0] * n,
        "energy_j": [200.0] * n,
        "temp_c": [60.0] * n,
        "sm_clock_mhz": [1410.0] * n,
        "energy_mj": [1000] * n,
        "energy_method": ["counter"] * n,
    }
    for k, v in columns.items():
        if v is None:
            cols.pop(k, None)
        else:
            cols[k] = v
    return {"batch_id": BATCH_ID, "agent_version": "0.4.2", "sent_at": NOW, "source": "nvml",
            "samples": cols}


def parse(doc, **limits):
    return wire.parse_batch(doc, **{**LIMITS, **limits})


# --- a real agent batch, end to end ------------------------------------------------------------

T0 = NOW - 20.0
AGENT_ROWS = [
    (T0, 0, Reading(40.0, 8192.0, 250.0, 5_000_000, 61.0, 1410.0, mem_util_pct=12.0,
                    mem_clock_mhz=1593.0, pcie_tx_kib_s=1000.0, pcie_rx_kib_s=2000.0,
                    throttle_reasons=0, power_limit_w=400.0), None, None),
    # A GPU whose driver answered nothing this tick: every reading null.
    (T0, 1, Reading(None, None, None, None, None, None), None, None),
    (T0 + 10, 0, Reading(100.0, 0.0, 300.0, 7_750_000, 62.5, 1980.0, throttle_reasons=4,
                         power_limit_w=400.0, sm_active_pct=55.5), 2750.0, "counter"),
    (T0 + 10, 1, Reading(0.0, 81920.0, 75.0, 123, -5.0, 0.0, throttle_reasons=2**32 - 1),
     750.0, "power"),
]


def test_json_int_takes_what_json_schema_calls_an_integer_and_nothing_else():
    assert [wire.json_int(v) for v in (3, 3.0, -0.0)] == [3, 3, 0]
    assert all(type(wire.json_int(v)) is int for v in (3, 3.0, -0.0))
    for other in (3.5, math.inf, math.nan, True, "3", None):
        got = wire.json_int(other)
        assert got is other or (isinstance(other, float) and math.isnan(got))


def test_nul_at_names_the_first_key_or_text_holding_one():
    assert wire.nul_at({"a": [1, "ok", {"b": "x\x00"}]}, "hw") == "hw.a[2].b"
    assert wire.nul_at({"gpu\x00": 1}) == "gpu\x00"
    assert wire.nul_at({"a": ["fine", 1.5, None, {"b": True}]}) is None


def test_an_agent_batch_parses_column_for_column():
    b = server_side(agent_payload(AGENT_ROWS))
    nan = math.nan
    assert b.batch_id == uuid.UUID(BATCH_ID)
    assert (b.agent_version, b.source, b.n) == (collectors.__version__, "nvml", 4)
    # Seconds to microseconds: NOW - 20 = 1,779,999,980 s.
    assert b.ts_us.dtype == np.int64
    assert b.ts_us.tolist() == [1_779_999_980_000_000, 1_779_999_980_000_000,
                                1_779_999_990_000_000, 1_779_999_990_000_000]
    assert b.gpu_index.dtype == np.int64 and b.gpu_index.tolist() == [0, 1, 0, 1]
    expected = {
        "util_pct": [40.0, nan, 100.0, 0.0],
        "mem_used_mib": [8192.0, nan, 0.0, 81920.0],
        "power_w": [250.0, nan, 300.0, 75.0],
        "energy_j": [nan, nan, 2750.0, 750.0],
        "temp_c": [61.0, nan, 62.5, -5.0],
        "sm_clock_mhz": [1410.0, nan, 1980.0, 0.0],
        "mem_util_pct": [12.0, nan, nan, nan],
        "mem_clock_mhz": [1593.0, nan, nan, nan],
        "pcie_tx_kib_s": [1000.0, nan, nan, nan],
        "pcie_rx_kib_s": [2000.0, nan, nan, nan],
        "power_limit_w": [400.0, nan, 400.0, nan],
        "sm_active_pct": [nan, nan, 55.5, nan],
        # Profiling columns null throughout are left out by the agent: unknown on the server.
        "sm_occupancy_pct": [nan] * 4, "tensor_active_pct": [nan] * 4,
        "dram_active_pct": [nan] * 4, "nvlink_tx_kib_s": [nan] * 4, "nvlink_rx_kib_s": [nan] * 4,
    }
    assert sorted(b.floats) == sorted(expected)
    for name, values in expected.items():
        assert b.floats[name].dtype == np.float64, name
        np.testing.assert_array_equal(b.floats[name], values, err_msg=name)
    assert b.energy_mj.dtype == np.int64
    assert b.energy_mj.tolist() == [5_000_000, 0, 7_750_000, 123]
    assert b.energy_mj_null.tolist() == [False, True, False, False]
    assert b.energy_method.dtype == np.int16 and b.energy_method.tolist() == [0, 0, 1, 2]
    assert b.throttle_reasons.dtype == np.int64
    assert b.throttle_reasons.tolist() == [0, 0, 4, 4_294_967_295]
    assert b.throttle_null.tolist() == [False, True, False, False]


def test_a_batch_without_optional_columns_stores_them_as_unknown():
    """An agent older than the bottleneck metrics: no optional column, every sample's energy
    counter present (so no null mask comes back from the column)."""
    b = parse(doc_of(3, energy_mj=[0, 7, 9], energy_method=[None, "counter_gap", "power"]))
    assert b.n == 3
    assert b.energy_mj.tolist() == [0, 7, 9]
    assert b.energy_mj_null.dtype == bool and b.energy_mj_null.tolist() == [False] * 3
    assert b.energy_method.tolist() == [0, 3, 2]
    assert b.throttle_reasons.dtype == np.int64 and b.throttle_reasons.tolist() == [0, 0, 0]
    assert b.throttle_null.dtype == bool and b.throttle_null.tolist() == [True, True, True]
    for name in wire.OPTIONAL_FLOAT_FIELDS:
        assert b.floats[name].dtype == np.float64 and b.floats[name].shape == (3,), name
        assert np.isnan(b.floats[name]).all(), name


def test_throttle_reasons_without_nulls_have_an_all_false_mask():
    b = parse(doc_of(2, throttle_reasons=[1, 2**31]))
    assert b.throttle_reasons.tolist() == [1, 2_147_483_648]
    assert b.throttle_null.dtype == bool and b.throttle_null.tolist() == [False, False]


def test_one_sample_is_a_batch():
    b = parse(doc_of(1))
    assert b.n == 1 and b.ts_us.tolist() == [1_779_999_990_000_000]


def test_timestamps_are_rounded_to_the_microsecond():
    # 0.1234567 s past the second: 123,456.7 us rounds to 123,457.
    b = parse(doc_of(2, ts=[NOW - 5.0, NOW - 4 + 0.1234567]))
    assert b.ts_us.tolist() == [1_779_999_995_000_000, 1_779_999_996_123_457]


def test_every_source_is_accepted_and_nothing_else():
    sources = ("nvml", "simulated", "dcgm", "amd-smi", "neuron-monitor", "tegrastats")
    for source in sources:
        assert parse({**doc_of(), "source": source}).source == source
    assert refusal(parse, {**doc_of(), "source": "NVML"}) == invalid(
        "source", "must be one of " + ", ".join(sources))
    assert refusal(parse, {k: v for k, v in doc_of().items() if k != "source"}) == invalid(
        "source", "must be one of " + ", ".join(sources))


# --- hostile input from the agent's own encoder ------------------------------------------------

def _rows_with(reading_1, energy_j=100.0):
    return [(T0, 0, Reading(50.0, 1.0, 100.0, 10, 60.0, 1000.0), None, None),
            (T0, 1, reading_1, energy_j, "power")]


@pytest.mark.parametrize("value, field", [
    (math.nan, "samples.power_w[1]"), (math.inf, "samples.power_w[1]"),
    (-math.inf, "samples.power_w[1]")])
def test_a_non_finite_reading_is_refused_naming_its_sample(value, field):
    # json.dumps writes NaN / Infinity / -Infinity: not JSON, so the strict parser fails and the
    # slow path names the field.
    payload = agent_payload(_rows_with(Reading(50.0, 1.0, value, 10, 60.0, 1000.0)))
    assert refusal(server_side, payload) == invalid(field, NAN_MSG)


def test_a_non_finite_energy_after_finite_numbers_is_the_one_named():
    payload = agent_payload(_rows_with(Reading(50.0, 1.0, 100.0, 10, 60.0, 1000.0),
                                       energy_j=math.inf))
    assert refusal(server_side, payload) == invalid("samples.energy_j[1]", NAN_MSG)


def test_a_negative_energy_counter_is_refused():
    payload = agent_payload(_rows_with(Reading(50.0, 1.0, 100.0, -3, 60.0, 1000.0)))
    assert refusal(server_side, payload) == invalid("samples.energy_mj[1]",
                                                    "must not be negative")


def test_negative_energy_is_outside_its_range():
    payload = agent_payload(_rows_with(Reading(50.0, 1.0, 100.0, 10, 60.0, 1000.0),
                                       energy_j=-0.5))
    assert refusal(server_side, payload) == invalid("samples.energy_j[1]",
                                                    "-0.5 is outside [0, 3.6e+07]")


def test_a_truncated_payload_is_a_400():
    payload = agent_payload(AGENT_ROWS)
    # Without its 8-byte trailer (CRC32, size) the stream inflates completely but never ends.
    assert refusal(body.decode_body, payload[:-8], True, 1 << 20) == (
        400, "bad_encoding", None, "gzip body is truncated")
    assert refusal(body.decode_body, payload[: len(payload) // 2], True, 1 << 20) == (
        400, "bad_encoding", None, "gzip body is truncated")


def test_a_json_document_cut_short_is_malformed():
    raw = gzip.decompress(agent_payload(AGENT_ROWS))[:-7]
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        why = str(exc)
    assert refusal(body.parse_json, raw) == (400, "malformed_json", None,
                                             f"body is not valid JSON: {why}")


# --- decode_body -------------------------------------------------------------------------------

def test_a_plain_body_up_to_the_limit_is_returned_as_is():
    assert body.decode_body(b"0123456789", False, 10) == b"0123456789"
    assert refusal(body.decode_body, b"0123456789A", False, 10) == (
        413, "too_large", None, "body is larger than 10 bytes")


def test_a_gzip_body_inflating_to_exactly_the_limit_is_accepted():
    raw = b'{"a": "' + b"x" * 93 + b'"}'  # 102 bytes
    assert len(raw) == 102
    assert body.decode_body(gzip.compress(raw), True, 102) == raw
    assert refusal(body.decode_body, gzip.compress(raw), True, 101) == (
        413, "too_large", None, "decompressed body is larger than 101 bytes")


@pytest.mark.parametrize("limit", [10, 100, 10_000, 20_000])
def test_a_gzip_body_over_the_limit_is_a_413(limit):
    raw = b"y" * 20_001
    assert refusal(body.decode_body, gzip.compress(raw), True, limit) == (
        413, "too_large", None, f"decompressed body is larger than {limit} bytes")


def test_a_gzip_bomb_is_inflated_only_up_to_the_limit():
    """16 MiB of zeros gzip to 16 KiB. Refusing it must not cost 16 MiB first: the inflater
    stops one byte past the 1 MiB limit, so the peak Python allocation stays near the limit
    (2.1 MiB measured) instead of the full 16 MiB (45 MiB measured, with the buffer's
    regrowth)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    bomb = b"".join(c.compress(zeros) for _ in range(16)) + c.flush()
    assert len(bomb) < 20_000
    tracemalloc.start()
    try:
        got = refusal(body.decode_body, bomb, True, 1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == (413, "too_large", None, "decompressed body is larger than 1048576 bytes")
    assert peak < 4 << 20


def test_a_gzip_flagged_body_that_is_not_gzip_is_a_400():
    assert refusal(body.decode_body, b"plain text", True, 1000) == (
        400, "bad_encoding", None,
        "body is not valid gzip: Error -3 while decompressing data: incorrect header check")
    # A zlib stream (deflate with the zlib header) is not gzip either.
    assert refusal(body.decode_body, zlib.compress(b'{"a": 1}'), True, 1000) == (
        400, "bad_encoding", None,
        "body is not valid gzip: Error -3 while decompressing data: incorrect header check")


def test_a_plain_body_is_not_inflated():
    payload = gzip.compress(b"{}")
    assert body.decode_body(payload, False, 1000) == payload


# --- parse_json --------------------------------------------------------------------------------

def test_valid_json_parses():
    assert body.parse_json(b'{"a": [1, 2.5, null], "b": {"c": "d"}}') == {
        "a": [1, 2.5, None], "b": {"c": "d"}}


@pytest.mark.parametrize("raw, field", [
    (b'{"a": 1.5, "b": NaN}', "b"),
    (b'{"a": {"b": [1.0, 2.0, Infinity]}}', "a.b[2]"),
    (b'{"x": "NaN", "samples": {"ts": [1, 2], "power_w": [3.5, -Infinity]}}',
     "samples.power_w[1]"),
    (b'[0.5, {"k": [1e309]}]', "[1].k[0]"),
    (b'{"a": [[1, 2], [3, 1e309]]}', "a[1][1]"),
])
def test_a_non_finite_number_is_named_by_its_path(raw, field):
    assert refusal(body.parse_json, raw) == invalid(field, NAN_MSG)


def _orjson_error(raw: bytes) -> str:
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return str(exc)
    raise AssertionError("valid JSON")


@pytest.mark.parametrize("raw", [b'{"a": 1,', b"NaN", b'{"a": "\xff"}', b"", b"[1, 2] x"])
def test_malformed_json_is_a_400_quoting_the_parser(raw):
    # A lone NaN is a non-finite number at the root: no field to name, so it is malformed.
    assert refusal(body.parse_json, raw) == (
        400, "malformed_json", None, f"body is not valid JSON: {_orjson_error(raw)}")


def test_json_nested_past_the_parser_is_a_400():
    raw = b"[" * 100_000 + b"]" * 100_000
    assert refusal(body.parse_json, raw) == (
        400, "malformed_json", None, "body is not valid JSON: nested too deeply")


# --- numeric_column and check_range ------------------------------------------------------------

@pytest.mark.parametrize("values, nullable, integer, field, message", [
    ([1, None, "2"], True, True, "samples.c[2]", "must be an integer or null, got str"),
    ([1, 2, 3.5], False, True, "samples.c[2]", "must be an integer, got float"),
    ([1, None], False, True, "samples.c[1]", "must be an integer, got NoneType"),
    ([True], False, True, "samples.c[0]", "must be an integer, got bool"),
    ([1.5, None, [2.0]], True, False, "samples.c[2]", "must be a number or null, got list"),
    ([1.5, 2, None], False, False, "samples.c[2]", "must be a number, got NoneType"),
    ([1.5, "1"], False, False, "samples.c[1]", "must be a number, got str"),
])
def test_a_wrong_type_names_the_first_bad_element(values, nullable, integer, field, message):
    assert refusal(wire.numeric_column, "c", values, nullable=nullable, integer=integer) == (
        invalid(field, message))


def test_a_column_holding_every_allowed_kind_is_accepted():
    arr = wire.numeric_column("c", [1, 2.5, None], nullable=True, integer=False)
    assert arr.dtype == np.float64
    np.testing.assert_array_equal(arr, [1.0, 2.5, math.nan])
    arr, mask = wire.numeric_column("c", [5, None, 7], nullable=True, integer=True)
    assert arr.dtype == np.int64 and arr.tolist() == [5, 0, 7]
    assert mask.dtype == bool and mask.tolist() == [False, True, False]
    arr, mask = wire.numeric_column("c", [5, 6], nullable=True, integer=True)
    assert arr.tolist() == [5, 6] and mask is None
    arr = wire.numeric_column("c", [5, -6], nullable=False, integer=True)
    assert isinstance(arr, np.ndarray) and arr.dtype == np.int64 and arr.tolist() == [5, -6]
    arr = wire.numeric_column("c", [5, 6], nullable=False, integer=False)
    assert arr.dtype == np.float64 and arr.tolist() == [5.0, 6.0]


@pytest.mark.parametrize("values, index", [
    ([0, 2**63], 1),
    ([-(2**63), 2**63], 1),
    ([2**63, 2**64], 0),
    ([-200, 2**63], 1),
    ([200, 2**63], 1),
    ([None, 2**63], 1),
    ([2**63 - 1, -(2**63) - 1], 1),
    ([-(2**63) - 1], 0),
    ([2**63], 0),
])
def test_an_integer_beyond_int64_is_named(values, index):
    assert refusal(wire.numeric_column, "c", values, nullable=True, integer=True) == invalid(
        f"samples.c[{index}]", "integer out of range")


def test_the_int64_extremes_are_integers():
    arr, mask = wire.numeric_column("c", [-(2**63), 2**63 - 1], nullable=True, integer=True)
    assert arr.tolist() == [-(2**63), 2**63 - 1] and mask is None


@pytest.mark.parametrize("values, nullable, index", [
    ([1.0, math.inf], False, 1),
    ([1.0, 2.0, math.nan], False, 2),
    ([None, 1.0, -math.inf], True, 2),
    ([None, math.inf], True, 1),
])
def test_non_finite_floats_are_named(values, nullable, index):
    assert refusal(wire.numeric_column, "c", values, nullable=nullable, integer=False) == (
        invalid(f"samples.c[{index}]", NAN_MSG))


def test_range_bounds_are_inclusive_and_nulls_pass():
    wire.check_range("c", np.array([0.0, math.nan, 100.0]), 0.0, 100.0)
    assert refusal(wire.check_range, "c", np.array([50.0, 100.5, -1.0]), 0.0, 100.0) == (
        invalid("samples.c[1]", "100.5 is outside [0, 100]"))
    assert refusal(wire.check_range, "c", np.array([50.0, math.nan, -0.25]), 0.0, 100.0) == (
        invalid("samples.c[2]", "-0.25 is outside [0, 100]"))


def test_each_float_field_is_checked_against_its_own_range():
    cases = {"util_pct": (100.5, "[0, 100]"), "mem_used_mib": (-1.0, "[0, 1.67772e+07]"),
             "power_w": (10_000.5, "[0, 10000]"), "energy_j": (-0.5, "[0, 3.6e+07]"),
             "temp_c": (-50.5, "[-50, 150]"), "sm_clock_mhz": (10_001.0, "[0, 10000]"),
             "mem_util_pct": (-0.5, "[0, 100]"), "mem_clock_mhz": (100_001.0, "[0, 100000]"),
             "pcie_tx_kib_s": (2e9, "[0, 1e+09]"), "pcie_rx_kib_s": (-2.0, "[0, 1e+09]"),
             "power_limit_w": (10_000.5, "[0, 10000]"),
             "sm_active_pct": (101.0, "[0, 100]"), "sm_occupancy_pct": (-1.0, "[0, 100]"),
             "tensor_active_pct": (100.25, "[0, 100]"), "dram_active_pct": (-0.5, "[0, 100]"),
             "nvlink_tx_kib_s": (1.5e10, "[0, 1e+10]"), "nvlink_rx_kib_s": (-1.0, "[0, 1e+10]")}
    for name, (bad, bounds) in cases.items():
        lo, hi = {**wire.FLOAT_FIELDS, **wire.OPTIONAL_FLOAT_FIELDS}[name]
        ok = parse(doc_of(2, **{name: [lo, hi]}))
        assert ok.floats[name].tolist() == [lo, hi], name
        doc = doc_of(2, **{name: [None, bad]})
        assert refusal(parse, doc) == invalid(f"samples.{name}[1]",
                                              f"{bad!r} is outside {bounds}"), name


def test_float_fields_take_integers_and_nulls_but_not_text():
    b = parse(doc_of(2, power_w=[None, 250], pcie_tx_kib_s=[1, None]))
    np.testing.assert_array_equal(b.floats["power_w"], [math.nan, 250.0])
    np.testing.assert_array_equal(b.floats["pcie_tx_kib_s"], [1.0, math.nan])
    assert refusal(parse, doc_of(2, temp_c=[60.0, "61"])) == invalid(
        "samples.temp_c[1]", "must be a number or null, got str")
    assert refusal(parse, doc_of(2, mem_clock_mhz=[1.0, True])) == invalid(
        "samples.mem_clock_mhz[1]", "must be a number or null, got bool")
    assert refusal(parse, doc_of(2, util_pct=[50.0, math.nan])) == invalid(
        "samples.util_pct[1]", NAN_MSG)
    assert refusal(parse, doc_of(2, nvlink_rx_kib_s=[None, math.inf])) == invalid(
        "samples.nvlink_rx_kib_s[1]", NAN_MSG)


# --- distinct_timestamps (host-level batches) --------------------------------------------------

def test_host_timestamps_inside_the_window_and_distinct_are_returned():
    # The window's ends are inside it; two samples 1 us apart are distinct.
    ts = [NOW - 86400, NOW - 1.0, NOW - 1.0 + 1e-6, NOW + 300]
    out = wire.distinct_timestamps(ts, 4, NOW, 86400, 300)
    assert out.dtype == np.float64 and out.tolist() == ts


def test_host_timestamps_outside_the_window_are_named():
    lo, hi = "1.77991e+09", "1.78e+09"
    assert refusal(wire.distinct_timestamps, [NOW, NOW - 86400.5], 2, NOW, 86400, 300) == (
        invalid("samples.ts[1]", f"1779913599.5 is outside [{lo}, {hi}]"))
    assert refusal(wire.distinct_timestamps, [NOW, NOW + 300.5], 2, NOW, 86400, 300) == (
        invalid("samples.ts[1]", f"1780000300.5 is outside [{lo}, {hi}]"))


def test_host_timestamps_must_be_numbers():
    assert refusal(wire.distinct_timestamps, [NOW, None], 2, NOW, 86400, 300) == invalid(
        "samples.ts[1]", "must be a number, got NoneType")
    assert refusal(wire.distinct_timestamps, [NOW, math.nan], 2, NOW, 86400, 300) == invalid(
        "samples.ts[1]", NAN_MSG)


def test_host_timestamps_in_one_microsecond_are_one_timestamp():
    assert refusal(wire.distinct_timestamps, [NOW - 2, NOW - 1, NOW - 2], 3, NOW, 86400,
                   300) == invalid("samples.ts", "two samples share a timestamp")
    # Float64 steps are 2**-22 s (0.24 us) here: t + 5e-7 is t + 2 steps = 0.477 us later,
    # which rounds to the same microsecond as t.
    t = NOW - 1.0
    assert t + 5e-7 == 1_779_999_999.0 + 2 * 2**-22
    assert refusal(wire.distinct_timestamps, [t, t + 5e-7], 2, NOW, 86400, 300) == invalid(
        "samples.ts", "two samples share a timestamp")


# --- batch_id, text fields, sent_at ------------------------------------------------------------

@pytest.mark.parametrize("value", ["not-a-uuid", 12345, None, "", BATCH_ID + "0"])
def test_a_batch_id_that_is_not_a_uuid_string_is_refused(value):
    assert refusal(wire.parse_batch_id, {"batch_id": value}) == invalid(
        "batch_id", "must be a UUID string")
    assert refusal(parse, {**doc_of(), "batch_id": value}) == invalid(
        "batch_id", "must be a UUID string")


def test_a_batch_id_is_parsed():
    assert wire.parse_batch_id({"batch_id": BATCH_ID.upper()}) == uuid.UUID(BATCH_ID)
    assert refusal(wire.parse_batch_id, {}) == invalid("batch_id", "must be a UUID string")


def test_text_fields():
    assert wire.text_field({}, "k", 5) == ""
    assert wire.text_field({"k": ""}, "k", 5) == ""
    assert wire.text_field({"k": "abcde"}, "k", 5) == "abcde"
    plain = invalid("k", "must be a string of at most 5 characters")
    assert refusal(wire.text_field, {"k": "abcdef"}, "k", 5) == plain
    assert refusal(wire.text_field, {"k": "a\x00b"}, "k", 5) == plain
    assert refusal(wire.text_field, {"k": 5}, "k", 5) == plain
    assert refusal(wire.text_field, {"k": None}, "k", 5) == plain
    required = invalid("k", "must be a non-empty string of at most 5 characters")
    assert wire.text_field({"k": "a"}, "k", 5, required=True) == "a"
    assert refusal(wire.text_field, {}, "k", 5, required=True) == required
    assert refusal(wire.text_field, {"k": ""}, "k", 5, required=True) == required
    assert refusal(wire.text_field, {"k": "abcdef"}, "k", 5, required=True) == required


def test_agent_version_is_optional_and_at_most_32_characters():
    doc = doc_of()
    del doc["agent_version"]
    assert parse(doc).agent_version == ""
    assert parse({**doc_of(), "agent_version": ""}).agent_version == ""
    assert parse({**doc_of(), "agent_version": "v" * 32}).agent_version == "v" * 32
    assert refusal(parse, {**doc_of(), "agent_version": "v" * 33}) == invalid(
        "agent_version", "must be a string of at most 32 characters")


def test_sent_at_is_an_optional_finite_number():
    doc = doc_of()
    del doc["sent_at"]
    assert parse(doc).n == 2
    for ok in (None, 1_780_000_000, 1.5):
        assert parse({**doc_of(), "sent_at": ok}).n == 2
    for bad in ("1780000000", True, math.nan, math.inf, [1]):
        assert refusal(parse, {**doc_of(), "sent_at": bad}) == invalid(
            "sent_at", "must be Unix seconds (a number)"), bad


def test_a_batch_must_be_an_object():
    for doc in ([], "x", None, 5):
        assert refusal(parse, doc) == invalid("", "the batch must be a JSON object")


# --- the samples object ------------------------------------------------------------------------

def test_samples_must_be_an_object():
    for samples in ([1], None, "ts"):
        assert refusal(parse, {**doc_of(), "samples": samples}) == invalid(
            "samples", "must be an object of equal-length arrays")
    doc = doc_of()
    del doc["samples"]
    assert refusal(parse, doc) == invalid("samples", "must be an object of equal-length arrays")


def test_a_required_column_missing_or_not_an_array_is_named():
    assert refusal(parse, doc_of(temp_c=None)) == invalid(
        "samples.temp_c", "is required and must be an array")
    assert refusal(parse, doc_of(energy_method="counter")) == invalid(
        "samples.energy_method", "is required and must be an array")


def test_an_optional_column_that_is_not_an_array_is_named():
    assert refusal(parse, doc_of(mem_util_pct=5.0)) == invalid(
        "samples.mem_util_pct", "must be an array")
    assert refusal(parse, doc_of(throttle_reasons={"0": 1})) == invalid(
        "samples.throttle_reasons", "must be an array")


def test_the_first_unknown_column_in_name_order_is_named():
    assert refusal(parse, doc_of(zz_extra=[1, 2], gpu_temp=[1, 2])) == invalid(
        "samples.gpu_temp", "is not a known field")


def test_an_empty_batch_is_refused():
    empty = {name: [] for name in wire.REQUIRED_COLUMNS}
    assert refusal(parse, {**doc_of(), "samples": empty}) == invalid(
        "samples.ts", "the batch holds no samples")


def test_the_sample_limit_is_inclusive():
    assert parse(doc_of(6)).n == 6
    assert refusal(parse, doc_of(7)) == (413, "too_many_samples", "samples.ts",
                                         "7 samples; a batch may hold at most 6")


def test_columns_of_another_length_are_named():
    assert refusal(parse, doc_of(3, power_w=[1.0, 2.0])) == invalid(
        "samples.power_w", "has 2 elements, ts has 3")
    assert refusal(parse, doc_of(3, pcie_rx_kib_s=[1.0, 2.0, 3.0, 4.0])) == invalid(
        "samples.pcie_rx_kib_s", "has 4 elements, ts has 3")


def test_sample_columns_for_another_batch_kind():
    """The host-level batches call it with their own columns and no optional ones."""
    doc = {"samples": {"ts": [1.0, 2.0], "joules": [3.0, 4.0]}}
    samples, n = wire.sample_columns(doc, ("ts", "joules"), 2)
    assert n == 2 and samples == doc["samples"]
    assert refusal(wire.sample_columns, doc, ("ts",), 2) == invalid(
        "samples.joules", "is not a known field")


# --- the timestamp window and the GPU index ----------------------------------------------------

def test_the_timestamp_window_is_inclusive():
    b = parse(doc_of(2, ts=[NOW - MAX_AGE, NOW + 300.0]))
    assert b.ts_us.tolist() == [1_777_408_000_000_000, 1_780_000_300_000_000]


def test_a_timestamp_in_the_future_is_named_with_its_distance():
    doc = doc_of(3, ts=[NOW - 2, NOW - 1, NOW + 301.4])
    assert refusal(parse, doc) == invalid(
        "samples.ts[2]", "is 301 s in the future; check the host's clock")


def test_a_timestamp_older_than_the_window_is_named():
    doc = doc_of(3, ts=[NOW - 2, NOW - MAX_AGE - 0.5, NOW - 1])
    assert refusal(parse, doc) == invalid("samples.ts[1]", "is older than 30 days")
    assert refusal(parse, doc, max_age_s=1.5 * 86400) == invalid(
        "samples.ts[1]", "is older than 1.5 days")


def test_timestamps_must_be_numbers():
    assert refusal(parse, doc_of(2, ts=[NOW - 2, None])) == invalid(
        "samples.ts[1]", "must be a number, got NoneType")
    assert refusal(parse, doc_of(2, ts=[NOW - 2, "now"])) == invalid(
        "samples.ts[1]", "must be a number, got str")


def test_gpu_indices_run_from_0_to_1023():
    b = parse(doc_of(2, gpu_index=[0, 1023]))
    assert b.gpu_index.tolist() == [0, 1023]
    for bad in (-1, 1024):
        assert refusal(parse, doc_of(3, gpu_index=[5, 5, bad])) == invalid(
            "samples.gpu_index[2]", "must be between 0 and 1023")
    assert parse(doc_of(2, gpu_index=[0, 1.0])).gpu_index.tolist() == [0, 1]  # JSON Schema's
    assert refusal(parse, doc_of(2, gpu_index=[0, 1.5])) == invalid(
        "samples.gpu_index[1]", "must be an integer, got float")
    assert refusal(parse, doc_of(2, gpu_index=[0, None])) == invalid(
        "samples.gpu_index[1]", "must be an integer, got NoneType")


# --- energy counter, method, throttle reasons --------------------------------------------------

def test_energy_counter_column():
    b = parse(doc_of(4, energy_mj=[None, 0, 5, 2**62]))
    assert b.energy_mj.tolist() == [0, 0, 5, 2**62]
    assert b.energy_mj_null.tolist() == [True, False, False, False]
    assert refusal(parse, doc_of(4, energy_mj=[0, 3, -1, -2])) == invalid(
        "samples.energy_mj[2]", "must not be negative")
    assert refusal(parse, doc_of(2, energy_mj=[0, 1.5])) == invalid(
        "samples.energy_mj[1]", "must be an integer or null, got float")


@pytest.mark.parametrize("methods, index", [
    (["counter", "power", "joules"], 2),
    (["counter", None, "Counter"], 2),
    ([None, 1, "power"], 1),
    (["power", ["counter"], None], 1),
    ([{"m": 1}, "counter", "power"], 0),
])
def test_an_unknown_energy_method_is_named(methods, index):
    assert refusal(parse, doc_of(3, energy_method=methods)) == invalid(
        f"samples.energy_method[{index}]",
        "must be \"counter\", \"power\", \"counter_gap\" or null")


def test_throttle_reasons_are_a_32_bit_mask():
    b = parse(doc_of(3, throttle_reasons=[0, None, 2**32 - 1]))
    assert b.throttle_reasons.tolist() == [0, 0, 4_294_967_295]
    assert b.throttle_null.tolist() == [False, True, False]
    message = "must be an NVML throttle-reason bitmask between 0 and 2**32 - 1"
    for bad in (2**32, -1):
        assert refusal(parse, doc_of(3, throttle_reasons=[4, 0, bad])) == invalid(
            "samples.throttle_reasons[2]", message)
    assert parse(doc_of(2, throttle_reasons=[0, 4.0])).throttle_reasons.tolist() == [0, 4]
    assert refusal(parse, doc_of(2, throttle_reasons=[0, 1.5])) == invalid(
        "samples.throttle_reasons[1]", "must be an integer or null, got float")


# --- two samples of one GPU at one instant -----------------------------------------------------

def test_two_samples_of_one_gpu_at_one_instant_are_refused():
    message = invalid("samples.ts", "two samples of the same GPU share a timestamp")
    t = NOW - 10
    for ts, gpus in [
        ([t, t], [3, 3]),  # two samples
        ([t, t + 1, t + 1], [0, 0, 0]),  # tick-major order, the repeat last
        ([t, t + 1, t + 1, t + 2], [0, 1, 1, 0]),
        ([t + 1, t, t + 1], [2, 2, 2]),  # out of order
        ([t, t + 0.0000002], [1, 1]),  # 0.2 us apart: one microsecond
    ]:
        assert refusal(parse, doc_of(len(ts), ts=ts, gpu_index=gpus)) == message, (ts, gpus)


def test_gpus_sharing_an_instant_in_any_order_are_distinct():
    t = NOW - 10
    for ts, gpus in [
        ([t, t, t + 1, t + 1], [0, 1, 0, 1]),  # tick-major
        ([t, t + 1, t + 1], [0, 1, 0]),  # GPUs out of index order in a tick
        ([t + 1, t + 1, t], [1, 0, 0]),
        ([t, t], [1, 0]),
        ([t, t + 2e-6, t + 2e-6, t + 1], [0, 1, 0, 1]),
    ]:
        b = parse(doc_of(len(ts), ts=ts, gpu_index=gpus))
        assert b.gpu_index.tolist() == gpus, (ts, gpus)


def test_a_tick_major_batch_is_proven_unique_without_sorting():
    """Agents send tick-major batches (every GPU once per tick, in index order). For those one
    O(n) comparison of (ts, gpu) keys proves no (GPU, instant) repeats; sorting (np.unique) is
    for any other order. Ingest keeps up with COPY only through the first, so it is pinned
    here: two GPUs at the ends of the index range, ticks 1 s apart, and the smallest batch that
    has a pair to compare (two samples)."""
    t = NOW - 10
    batches = [doc_of(6, ts=[t, t, t + 1, t + 1, t + 2, t + 2], gpu_index=[0, 1023] * 3),
               doc_of(2, ts=[t, t], gpu_index=[0, 1])]

    def no_sorting(*args, **kwargs):
        raise AssertionError("np.unique called for a tick-major batch")

    real = np.unique
    np.unique = no_sorting
    try:
        parsed = [parse(doc) for doc in batches]
    finally:
        np.unique = real
    assert [b.gpu_index.tolist() for b in parsed] == [[0, 1023] * 3, [0, 1]]


def test_keys_unique_directly():
    # Relative microseconds and GPU indices as the parser hands them over.
    ts = np.array([10, 10, 20, 20], dtype=np.int64)
    assert wire._keys_unique(ts, np.array([0, 1, 0, 1]))
    assert wire._keys_unique(ts, np.array([1, 0, 1, 0]))
    assert not wire._keys_unique(ts, np.array([0, 0, 1, 1]) * 0 + 7)
    assert wire._keys_unique(np.array([5], dtype=np.int64), np.array([9]))
    # 1,025 us apart on GPUs 0 and 1024 would share 1,025 * 1024 + ... if the key mixed them.
    assert wire._keys_unique(np.array([0, 1, 0], dtype=np.int64), np.array([1, 0, 1023]))
    assert not wire._keys_unique(np.array([7, 3, 7], dtype=np.int64), np.array([2, 5, 2]))


# --- check_gpu_indices -------------------------------------------------------------------------

def test_a_gpu_not_registered_is_named_at_its_first_sample():
    b = parse(doc_of(5, gpu_index=[0, 7, 3, 5, 3]))
    wire.check_gpu_indices(b, {0, 3, 5, 7})
    wire.check_gpu_indices(b, {0, 1, 3, 5, 7, 8})
    # 3 and 7 unknown: the lower one (3) is named, at its first sample, index 2.
    assert refusal(wire.check_gpu_indices, b, {0, 5}) == invalid(
        "samples.gpu_index[2]", "GPU 3 is not registered for this host; "
        "the agent registers GPUs through POST /api/v1/inventory")
    assert refusal(wire.check_gpu_indices, b, {0, 3}) == invalid(
        "samples.gpu_index[3]", "GPU 5 is not registered for this host; "
        "the agent registers GPUs through POST /api/v1/inventory")


# --- parse_spool_report ------------------------------------------------------------------------

def test_spool_report_absent_or_null_is_none():
    assert wire.parse_spool_report({}) is None
    assert wire.parse_spool_report({"spool": None}) is None


def test_spool_report_values():
    ten_years = 10 * 365 * 86400
    assert wire.parse_spool_report({"spool": {"depth": 0, "oldest_age_s": None}}) == (0, None)
    assert wire.parse_spool_report({"spool": {"depth": 0}}) == (0, None)
    got = wire.parse_spool_report({"spool": {"depth": 2**31 - 1, "oldest_age_s": 0}})
    assert got == (2**31 - 1, 0.0) and type(got[1]) is float
    for age in (5, 3000, 12.5, ten_years - 1):
        got = wire.parse_spool_report({"spool": {"depth": 3, "oldest_age_s": age}})
        assert got == (3, float(age)) and type(got[1]) is float, age


def test_spool_report_refusals():
    depth = invalid("spool.depth", "must be a non-negative integer")
    age = invalid("spool.oldest_age_s", "must be a non-negative number of seconds or null")
    assert refusal(wire.parse_spool_report, {"spool": [3, 5.0]}) == invalid(
        "spool", "must be an object")
    assert refusal(wire.parse_spool_report, {"spool": 3}) == invalid("spool",
                                                                      "must be an object")
    assert wire.parse_spool_report({"spool": {"depth": 3.0}}) == (3, None)
    for bad in (-1, 2**31, True, 1.5, "3", None):
        assert refusal(wire.parse_spool_report, {"spool": {"depth": bad}}) == depth, bad
    assert refusal(wire.parse_spool_report, {"spool": {"oldest_age_s": 5}}) == depth
    for bad in (-0.5, 10 * 365 * 86400, math.nan, math.inf, "5", True):
        assert refusal(wire.parse_spool_report,
                       {"spool": {"depth": 1, "oldest_age_s": bad}}) == age, bad


def test_spool_report_as_the_agent_sends_it():
    doc = json.loads(gzip.decompress(agent_payload(AGENT_ROWS)))
    doc["spool"] = {"depth": 12, "oldest_age_s": 93.25}
    assert wire.parse_spool_report(doc) == (12, 93.25)
