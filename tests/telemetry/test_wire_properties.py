"""Property tests of the sample batch validator (greenops.telemetry.wire.parse_batch), and a batch
exactly at the default sample limit through the API.

Properties: a valid batch round-trips column for column; one bad value anywhere is a 422 naming
exactly that column and index; any JSON document at all is either a Batch or a FieldError (never
another exception, which the API would answer 500)."""

from __future__ import annotations

import math
import time
import uuid

import numpy as np
import pytest
from django.conf import settings as django_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenops.errors import FieldError
from greenops.telemetry import wire
from tests.support.factories import gz, make_batch

NOW_S = 1_780_000_000.0
LIMITS = dict(now_s=NOW_S, max_samples=500, max_future_s=300, max_age_s=30 * 86400)
FAST = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def _nullable_in(lo: float, hi: float):
    return st.one_of(st.none(), st.floats(lo, hi, allow_nan=False, allow_infinity=False))


@st.composite
def valid_batches(draw) -> dict:
    n_gpus = draw(st.integers(1, 8))
    ticks = draw(st.integers(1, 20))
    start = draw(st.floats(NOW_S - 29 * 86400, NOW_S - 100))
    step = draw(st.sampled_from([0.5, 1.0, 10.0]))
    gpus = draw(st.lists(st.integers(0, 1023), min_size=n_gpus, max_size=n_gpus, unique=True))
    cols: dict[str, list] = {"ts": [], "gpu_index": []}
    for t in range(ticks):
        for g in gpus:
            cols["ts"].append(start + t * step)
            cols["gpu_index"].append(g)
    n = len(cols["ts"])
    for name, (lo, hi) in wire.FLOAT_FIELDS.items():
        cols[name] = draw(st.lists(_nullable_in(lo, hi), min_size=n, max_size=n))
    cols["energy_mj"] = draw(st.lists(st.one_of(st.none(), st.integers(0, 2**62)),
                                      min_size=n, max_size=n))
    cols["energy_method"] = draw(st.lists(st.sampled_from([None, "counter", "power"]),
                                          min_size=n, max_size=n))
    return {"batch_id": str(uuid.uuid4()), "agent_version": "0.1.0", "source": "nvml",
            "samples": cols}


@FAST
@given(valid_batches())
def test_a_valid_batch_round_trips_column_for_column(doc):
    b = wire.parse_batch(doc, **LIMITS)
    cols = doc["samples"]
    assert b.n == len(cols["ts"])
    assert b.ts_us.tolist() == [round(t * 1_000_000) for t in cols["ts"]]
    assert b.gpu_index.tolist() == cols["gpu_index"]
    for name in wire.FLOAT_FIELDS:
        got = b.floats[name].tolist()
        assert [None if math.isnan(v) else v for v in got] == cols[name], name
    assert b.energy_mj_null.tolist() == [v is None for v in cols["energy_mj"]]
    assert [None if null else int(v) for v, null in zip(b.energy_mj, b.energy_mj_null,
                                                        strict=True)] == cols["energy_mj"]
    assert b.energy_method.tolist() == [wire.ENERGY_METHODS[m] for m in cols["energy_method"]]
    # Optional bottleneck columns the agent did not send are unknown (NaN), never 0.
    assert all(np.isnan(b.floats[name]).all() for name in wire.OPTIONAL_FLOAT_FIELDS)


# column -> values outside what the validator may accept there. NaN and infinity are not here:
# JSON cannot carry them, and wire.parse_json refuses them before parse_batch runs
# (tests/api/test_non_finite_intakes.py).
BAD_VALUES = {
    **{name: [lo - 1.0, hi * 1.5 + 1.0, "12", True]
       for name, (lo, hi) in wire.FLOAT_FIELDS.items()},
    "gpu_index": [-1, 1024, 1.5, None, "0"],
    "energy_mj": [-1, 1.5, "7", [1]],
    "energy_method": ["joules", 1, ["counter"]],
    "ts": [None, "now", NOW_S + 3600, NOW_S - 31 * 86400],
}


@FAST
@given(valid_batches(), st.sampled_from(sorted(BAD_VALUES)), st.data())
def test_one_bad_value_is_a_422_naming_its_column_and_index(doc, column, data):
    cols = doc["samples"]
    i = data.draw(st.integers(0, len(cols["ts"]) - 1), label="index")
    cols[column][i] = data.draw(st.sampled_from(BAD_VALUES[column]), label="value")
    with pytest.raises(FieldError) as caught:
        wire.parse_batch(doc, **LIMITS)
    assert caught.value.status == 422
    assert caught.value.field == f"samples.{column}[{i}]"


def _columns_one_by_one(samples: dict, n: int) -> dict:
    """The float columns validated the plain way: numeric_column and check_range per column,
    in wire's column order (what parse_batch did before it checked them as one matrix)."""
    out = {}
    for name, (lo, hi) in {**wire.FLOAT_FIELDS, **wire.OPTIONAL_FLOAT_FIELDS}.items():
        if name not in samples:
            out[name] = np.full(n, np.nan)
            continue
        arr = wire.numeric_column(name, samples[name], nullable=True, integer=False)
        wire.check_range(name, arr, lo, hi)
        out[name] = arr
    return out


# Anything a float column might hold: in range, null, out of range, a NaN or an infinity (a
# Python float: a caller that builds the document itself), other JSON types, a huge integer.
float_cells = st.one_of(
    st.none(), st.floats(-1e3, 2e3, allow_nan=False, allow_infinity=False),
    st.integers(-5, 200), st.just(math.nan), st.just(math.inf), st.just(-math.inf),
    st.booleans(), st.just("1"), st.just(10**400), st.just(-1e12))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.integers(1, 6), st.data())
def test_the_float_matrix_agrees_with_checking_column_by_column(n, data):
    """Values, or the FieldError (status, field and message), equal the one-by-one check's."""
    names = [*wire.FLOAT_FIELDS, *data.draw(st.lists(
        st.sampled_from(sorted(wire.OPTIONAL_FLOAT_FIELDS)), unique=True), label="optional")]
    good = st.one_of(st.none(), st.floats(0, 100, allow_nan=False))  # in every column's range
    samples = {name: data.draw(st.lists(good, min_size=n, max_size=n), label=name)
               for name in names}
    for _ in range(data.draw(st.integers(0, 2), label="odd cells")):
        column = samples[data.draw(st.sampled_from(names), label="column")]
        column[data.draw(st.integers(0, n - 1), label="row")] = data.draw(float_cells)

    def run(check):
        try:
            return {k: v.tolist() for k, v in check(samples, n).items()}
        except FieldError as exc:
            return (exc.status, exc.field, exc.message)
        except OverflowError:  # 10**400 as a Python int: the same on both paths
            return "OverflowError"

    want, got = run(_columns_one_by_one), run(wire._float_columns)
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    else:
        assert got == want


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20,
)
column_names = st.sampled_from([*wire.REQUIRED_COLUMNS, *wire.OPTIONAL_COLUMNS, "extra"])


@FAST
@given(st.one_of(
    json_values,
    st.fixed_dictionaries({"batch_id": st.just(str(uuid.uuid4())), "source": st.just("nvml"),
                           "samples": st.dictionaries(column_names, json_values, max_size=12)}),
))
def test_any_json_document_is_a_batch_or_a_field_error(doc):
    try:
        wire.parse_batch(doc, **LIMITS)
    except FieldError as exc:
        assert 400 <= exc.status < 500 and exc.message


def test_a_batch_exactly_at_the_limit_passes_and_one_more_sample_is_413():
    limit = LIMITS["max_samples"]
    doc = make_batch(n_per_gpu=limit // 4, gpus=(0, 1, 2, 3), start=NOW_S - 1000, step=1.0)
    assert len(doc["samples"]["ts"]) == limit
    assert wire.parse_batch(doc, **LIMITS).n == limit
    for cols in doc["samples"].values():
        cols.append(cols[-1])
    with pytest.raises(FieldError) as caught:
        wire.parse_batch(doc, **LIMITS)
    assert (caught.value.status, caught.value.field) == (413, "samples.ts")


@pytest.mark.django_db
def test_the_default_sample_limit_fits_inside_the_default_body_limits(host, post_batch):
    """INGEST_MAX_SAMPLES (20,000) samples in one gzip POST are accepted whole: the body and
    decompressed-size limits do not refuse a batch the sample limit allows."""
    _, token = host
    limit = django_settings.INGEST_MAX_SAMPLES
    doc = make_batch(n_per_gpu=limit // 2, gpus=(0, 1), start=time.time() - limit, step=1.0)
    assert len(doc["samples"]["ts"]) == limit
    body = gz(doc)
    assert len(body) < django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    r = post_batch(token, doc)
    assert r.status_code == 202, r.content
    assert r.json()["samples"] == limit
