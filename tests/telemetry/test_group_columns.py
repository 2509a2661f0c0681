"""The worker reads a group's stored bodies in one pass (store.GroupColumns): joined, they must give
exactly the rows -- values, null masks, batch numbers, so the same COPY stream byte for byte -- that
reading each batch alone gave (wire.parse_validated, then store.batch_columns), whatever columns
each batch sent; and what the join cannot take goes back to being read alone."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenops.telemetry import store, wire
from tests.support.factories import make_batch

NOW_S = 1_780_000_000.0
GPU_IDS = {0: 101, 1: 102, 2: 103, 5: 106, 7: 108}
OPTIONAL = sorted(wire.OPTIONAL_COLUMNS)


def _cells(name: str):
    if name == wire.THROTTLE_FIELD:
        return st.one_of(st.none(), st.integers(0, 2**32 - 1))
    lo, hi = {**wire.FLOAT_FIELDS, **wire.OPTIONAL_FLOAT_FIELDS}[name]
    # JSON numbers as the API lets them through: floats, integers, nulls.
    return st.one_of(st.none(), st.floats(lo, hi, allow_nan=False),
                     st.integers(int(max(lo, -50)), int(min(hi, 5000))))


@st.composite
def stored_bodies(draw) -> dict:
    gpus = draw(st.lists(st.sampled_from(sorted(GPU_IDS)), min_size=1, max_size=4, unique=True))
    ticks = draw(st.integers(1, 6))
    start = draw(st.floats(NOW_S - 86400, NOW_S - 100)) if draw(st.booleans()) else float(
        draw(st.integers(int(NOW_S) - 86400, int(NOW_S) - 100)))
    samples: dict[str, list] = {"ts": [], "gpu_index": []}
    for t in range(ticks):
        for g in gpus:
            samples["ts"].append(start + t * 0.5)
            samples["gpu_index"].append(g)
    n = len(samples["ts"])
    for name in wire.FLOAT_FIELDS:
        samples[name] = draw(st.lists(_cells(name), min_size=n, max_size=n))
    # Past 2**53 too: a counter must not pass through a float.
    samples["energy_mj"] = draw(st.lists(st.one_of(st.none(), st.integers(0, 2**63 - 1)),
                                         min_size=n, max_size=n))
    samples["energy_method"] = draw(st.lists(
        st.sampled_from([None, "counter", "power", "counter_gap"]), min_size=n, max_size=n))
    for name in draw(st.lists(st.sampled_from(OPTIONAL), unique=True, max_size=5)):
        samples[name] = draw(st.lists(_cells(name), min_size=n, max_size=n))
    return {"batch_id": str(uuid.uuid4()), "agent_version": "0.9.1",
            "source": draw(st.sampled_from(["nvml", "simulated", "dcgm"])), "samples": samples}


def one_by_one(docs: list[dict]) -> tuple[dict, dict]:
    """What the worker built before: each batch parsed alone, its columns, joined end to end."""
    parts = [store.batch_columns(wire.parse_validated(doc), GPU_IDS) for doc in docs]
    values = {name: np.concatenate([v[name] for v, _ in parts]) for name in parts[0][0]}
    values["batch_no"] = np.repeat(np.arange(len(docs), dtype=np.int32),
                                   [len(doc["samples"]["ts"]) for doc in docs])
    nulls = {name: np.concatenate([nl[name] for _, nl in parts]) for name in parts[0][1]}
    return values, nulls


def assert_same_rows(got: tuple[dict, dict], want: tuple[dict, dict]) -> None:
    (values, nulls), (want_values, want_nulls) = got, want
    assert sorted(values) == sorted(want_values)
    for name, arr in want_values.items():
        assert values[name].dtype == arr.dtype, name
        np.testing.assert_array_equal(values[name], arr, err_msg=name)
    assert sorted(nulls) == sorted(want_nulls)
    for name, mask in want_nulls.items():
        np.testing.assert_array_equal(nulls[name], mask, err_msg=name)
    n = int(want_values["batch_no"].size)
    assert store.copy_binary(values, nulls, n, store.GROUP_COLUMNS) == store.copy_binary(
        want_values, want_nulls, n, store.GROUP_COLUMNS)


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(stored_bodies(), min_size=1, max_size=6))
def test_joined_bodies_give_the_rows_each_body_gave_alone(docs):
    columns = store.GroupColumns()
    for doc in docs:
        columns.add(doc, GPU_IDS)
    assert_same_rows(columns.build(), one_by_one(docs))
    assert columns.counts == [len(doc["samples"]["ts"]) for doc in docs]
    # Each batch's first and last sample, in µs (late.py marks the hours between).
    for doc, (first, last) in zip(docs, columns.spans, strict=True):
        ts_us = wire.parse_validated(doc).ts_us
        assert (first, last) == (int(ts_us.min()), int(ts_us.max()))


def test_the_agents_batches_by_hand():
    # Two batches of GPU 0 and 1: the first with throttle reasons and a null energy counter,
    # the second without either optional column. 1,780,000,000.25 s = ...000,250,000 µs.
    a = {"batch_id": str(uuid.uuid4()), "source": "nvml", "samples": {
        "ts": [NOW_S + 0.25, NOW_S + 0.25], "gpu_index": [0, 1], "util_pct": [97, 3.5],
        "mem_used_mib": [80_000, 512], "power_w": [612.25, None], "energy_mj": [None, 2**60 + 1],
        "energy_j": [None, 71.0], "energy_method": [None, "power"], "temp_c": [71, 38],
        "sm_clock_mhz": [1980, 345], "throttle_reasons": [4, None]}}
    b = {"batch_id": str(uuid.uuid4()), "source": "simulated", "samples": {
        "ts": [NOW_S + 1], "gpu_index": [7], "util_pct": [0], "mem_used_mib": [0],
        "power_w": [70], "energy_mj": [5], "energy_j": [70.0], "energy_method": ["counter"],
        "temp_c": [30], "sm_clock_mhz": [210]}}
    columns = store.GroupColumns()
    columns.add(a, GPU_IDS)
    columns.add(b, GPU_IDS)
    values, nulls = columns.build()
    assert values["gpu_id"].tolist() == [101, 102, 108]
    assert values["ts"].tolist() == [1_780_000_000_250_000, 1_780_000_000_250_000,
                                     1_780_000_001_000_000]
    assert values["energy_mj"].tolist() == [0, 2**60 + 1, 5]  # exact past 2**53
    assert nulls["energy_mj"].tolist() == [True, False, False]
    assert values["energy_method"].tolist() == [0, 2, 1]
    assert nulls["power_w"].tolist() == [False, True, False]
    assert values["throttle_reasons"].tolist() == [4, 0, 0]
    assert nulls["throttle_reasons"].tolist() == [False, True, True]  # b did not send it
    assert nulls["nvlink_tx_kib_s"].all()  # nobody sent it
    assert values["simulated"].tolist() == [False, False, True]
    assert values["batch_no"].tolist() == [0, 0, 1]
    assert columns.spans == [(1_780_000_000_250_000, 1_780_000_000_250_000),
                             (1_780_000_001_000_000, 1_780_000_001_000_000)]


def test_an_unknown_gpu_is_read_alone_at_its_place_in_the_group():
    docs = [make_batch(n_per_gpu=3, gpus=(0, 1), start=NOW_S - 600 + 10 * i) for i in range(3)]
    odd = dict(docs[1], samples=dict(docs[1]["samples"]))
    odd["samples"]["gpu_index"] = [3] * len(odd["samples"]["ts"])  # not one of the host's GPUs
    columns = store.GroupColumns()
    columns.add(docs[0], GPU_IDS)
    with pytest.raises(store.NotGrouped):
        columns.add(odd, GPU_IDS)
    # The worker reads it alone (where check_gpu_indices names it); here the middle batch is
    # one that reads alone fine, so the rows must be the three batches' rows in order.
    columns.add_batch(wire.parse_validated(docs[1]), GPU_IDS)
    columns.add(docs[2], GPU_IDS)
    values, nulls = columns.build()
    want_values, want_nulls = one_by_one(docs)
    order = np.argsort(values["batch_no"], kind="stable")  # the alone batch's rows come last
    assert_same_rows(({k: v[order] for k, v in values.items()},
                      {k: v[order] for k, v in nulls.items()}), (want_values, want_nulls))
    assert [columns.spans[i] for i in range(3)] == [
        (int(wire.parse_validated(d).ts_us.min()), int(wire.parse_validated(d).ts_us.max()))
        for d in docs]


@pytest.mark.parametrize("spoil", [
    lambda s: s.update(util_pct=["high"] * len(s["ts"])),  # not what the API stores
    lambda s: s.update(energy_method=["joules"] * len(s["ts"])),
    lambda s: s.update(energy_mj=[2**64] * len(s["ts"])),
    lambda s: s.update(energy_mj=[3.5] * len(s["ts"])),  # numpy would store 3
    lambda s: s.update(energy_mj=[3.0] * len(s["ts"])),  # the API's 3: read alone, as 3
    lambda s: s.update(throttle_reasons=[True] * len(s["ts"])),
    lambda s: s.update(throttle_reasons=[2**40] * len(s["ts"])),  # no NVML bitmask: refused alone
])
def test_a_body_the_join_cannot_convert_sends_the_group_back_to_one_by_one(spoil):
    doc = make_batch(n_per_gpu=3, gpus=(0, 5), start=NOW_S - 600)
    spoil(doc["samples"])
    columns = store.GroupColumns()
    columns.add(doc, GPU_IDS)  # its shape is right; its values are not
    with pytest.raises(store.NotGrouped):
        columns.build()


@pytest.mark.parametrize("spoil", [
    lambda d: d.pop("samples"),
    lambda d: d["samples"].pop("energy_mj"),
    lambda d: d["samples"]["util_pct"].pop(),  # a column shorter than ts
    lambda d: d["samples"].update(ts=[]),
    lambda d: d.update(samples=[1, 2]),
    lambda d: d.pop("source"),
])
def test_a_body_of_another_shape_is_not_joined(spoil):
    doc = make_batch(n_per_gpu=3, gpus=(0, 5), start=NOW_S - 600)
    spoil(doc)
    columns = store.GroupColumns()
    with pytest.raises(store.NotGrouped):
        columns.add(doc, GPU_IDS)
    assert columns.counts == []


def _both_minutes(values: dict, nulls: dict) -> tuple[list[tuple], list[tuple]]:
    """The rows' minutes as the worker makes them (store.minute_rollups, through a binary COPY
    into a table like the fold's stage, read back) and as PostgreSQL aggregates them (store._agg
    over a table of the rows)."""
    from django.db import connection

    n = int(values["ts"].size)
    names = ", ".join(name for name, _ in store.SAMPLE_COLUMNS)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE samples_probe (LIKE telemetry_gpusample)")
        cursor.execute(f"CREATE TEMP TABLE minutes_probe AS {store._agg('samples_probe')} "
                       "WITH NO DATA")  # the fold stage's columns and types
        try:
            with cursor.copy(f"COPY samples_probe ({names}) FROM STDIN (FORMAT BINARY)") as cp:
                cp.write(store.copy_binary(values, nulls, n, store.SAMPLE_COLUMNS))
            minutes, unknown, columns = store.minute_rollups(values, nulls)
            with cursor.copy("COPY minutes_probe FROM STDIN (FORMAT BINARY)") as cp:
                cp.write(store.copy_binary(minutes, unknown, len(minutes["gpu_id"]), columns))
            cursor.execute("SELECT * FROM minutes_probe ORDER BY 1, 2")
            mine = cursor.fetchall()
            cursor.execute(store._agg("samples_probe") + " ORDER BY 1, 2")
            return mine, cursor.fetchall()
        finally:
            cursor.execute("DROP TABLE samples_probe, minutes_probe")


@pytest.mark.django_db
@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(stored_bodies(), min_size=1, max_size=5))
def test_the_workers_minutes_are_what_postgresql_aggregates(docs):
    """The optimistic path folds minutes the worker aggregated (store.minute_rollups) where the
    stage's path lets PostgreSQL aggregate the samples (store._agg): every column of every minute
    the same, read back from PostgreSQL -- counts, maxima and minima exactly, sums to the last
    few bits (they add the same numbers, perhaps in another order)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the aggregates are PostgreSQL's")
    columns = store.GroupColumns()
    for doc in docs:
        columns.add(doc, GPU_IDS)
    mine, theirs = _both_minutes(*columns.build())
    assert [row[:2] for row in mine] == [row[:2] for row in theirs]
    names = ["gpu_id", "bucket", *(name for name, _, _ in store._ROLLUP_ALL)]
    for got, want in zip(mine, theirs, strict=True):
        for name, a, b in zip(names, got, want, strict=True):
            assert type(a) is type(b), (name, a, b)
            if isinstance(b, float):
                assert a == pytest.approx(b, rel=1e-12, abs=1e-9), (name, got[:2])
            else:
                assert a == b, (name, got[:2], a, b)
