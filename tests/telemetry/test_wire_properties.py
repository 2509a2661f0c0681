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


# Any JSON at all, and batch-shaped objects whose columns hold any JSON.
any_documents = st.one_of(
    json_values,
    st.fixed_dictionaries({"batch_id": st.just(str(uuid.uuid4())), "source": st.just("nvml"),
                           "samples": st.dictionaries(column_names, json_values, max_size=12)}),
)


@FAST
@given(any_documents)
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


# --- wire.intake: the web's check without arrays answers exactly as parse_batch --------------

def _outcome(check, doc):
    """What a check says of a document: the Intake's fields, or the FieldError's."""
    try:
        got = check(doc)
    except FieldError as exc:
        return ("error", exc.status, exc.field, exc.message)
    except OverflowError:  # 10**400 as a Python int (JSON cannot carry it): as above
        return ("OverflowError",)
    if isinstance(got, wire.Batch):
        return ("ok", got.batch_id, got.agent_version, got.n, sorted(set(got.gpu_index.tolist())))
    return ("ok", got.batch_id, got.agent_version, got.n, got.gpus)


def _same_answer(doc) -> tuple:
    want = _outcome(lambda d: wire.parse_batch(d, **LIMITS), doc)
    got = _outcome(lambda d: wire.intake(d, **LIMITS), doc)
    assert got == want
    return got


def _sorted_by_tick(doc: dict) -> dict:
    cols = doc["samples"]
    order = sorted(range(len(cols["ts"])), key=lambda i: (cols["ts"][i], cols["gpu_index"][i]))
    doc["samples"] = {k: [v[i] for i in order] for k, v in cols.items()}
    return doc


# Odd cells for any column: what float_cells holds, integers at and past the int64, uint32 and
# GPU-index limits, a NaN or a 3.0 where an integer belongs, an unknown energy method.
any_cells = st.one_of(float_cells, st.sampled_from([
    -1, 0, 1023, 1024, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 3.0, "counter", "joules", [1],
    {"a": 1}]))
# Each column's bounds, and just past them.
EDGES = {
    **{name: [lo, hi, lo - 0.5, hi + 0.5]
       for name, (lo, hi) in {**wire.FLOAT_FIELDS, **wire.OPTIONAL_FLOAT_FIELDS}.items()},
    "ts": [NOW_S + 300, NOW_S + 300.5, NOW_S - 30 * 86400, NOW_S - 30 * 86400 - 0.5],
    "gpu_index": [0, 1023, -1, 1024],
    "energy_mj": [0, 2**63 - 1, -1, 2**63],
    wire.THROTTLE_FIELD: [0, 2**32 - 1, -1, 2**32],
    "energy_method": [None, "counter_gap", "Counter", ""],
}


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(valid_batches(), st.booleans(), st.data())
def test_intake_answers_as_parse_batch_does(doc, tick_major, data):
    """The same Intake, or the same FieldError (status, field and message), for valid batches
    in either order and for batches with odd cells, edge values, a reading repeated at one
    instant, extra columns and odd top-level fields."""
    if tick_major:  # the order the fast passes vouch for (valid_batches' GPUs are unsorted)
        _sorted_by_tick(doc)
    cols = doc["samples"]
    n = len(cols["ts"])
    names = data.draw(st.lists(st.sampled_from(sorted(wire.OPTIONAL_COLUMNS)), unique=True),
                      label="optional columns")
    for name in names:
        cols[name] = [0 if name == wire.THROTTLE_FIELD else 1.0] * n
    for _ in range(data.draw(st.integers(0, 2), label="odd cells")):
        name = data.draw(st.sampled_from(sorted(cols)), label="column")
        cols[name][data.draw(st.integers(0, n - 1), label="row")] = data.draw(
            st.one_of(st.sampled_from(EDGES[name]), any_cells), label="value")
    if n > 1 and data.draw(st.booleans(), label="a reading repeated"):
        i, j = data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
        cols["ts"][i], cols["gpu_index"][i] = cols["ts"][j], cols["gpu_index"][j]
    if data.draw(st.integers(0, 3), label="odd top level") == 0:
        key = data.draw(st.sampled_from(["batch_id", "agent_version", "sent_at", "source"]))
        doc[key] = data.draw(st.sampled_from(
            [None, "", "x" * 33, "a\x00b", 1.5, math.nan, "dcgm", "nope", str(uuid.uuid4())]))
    _same_answer(doc)


@FAST
@given(any_documents)
def test_intake_answers_any_json_document_as_parse_batch_does(doc):
    _same_answer(doc)


def test_intake_vouches_for_what_the_agent_sends(tmp_path):
    """The agent's own batch (collectors' Agent over an 8-GPU fake NVML, with its spool report)
    is vouched for by the fast passes, not sent through parse_batch -- else the web pays for
    both -- and gives parse_batch's answer."""
    from collectors import batch as agent_wire
    from collectors.agent import Agent
    from collectors.sources import NvmlSource
    from collectors.spool import Spool
    from tests.support.agent_fakes import FakeNvml

    spool = Spool(tmp_path / "spool.db")
    agent = Agent(NvmlSource(FakeNvml(n=8)), spool, shipper=None, interval_s=1.0,
                  batch_seconds=10.0)
    for _ in range(10):
        agent.sample_once()
    agent.seal_batch()
    doc = agent_wire.decode(spool.payloads()[0])
    spool.close()
    limits = {**LIMITS, "now_s": time.time()}
    assert len(doc["samples"]["ts"]) == 80
    vouched = wire._vouch(doc, limits["now_s"], limits["max_samples"], limits["max_future_s"],
                          limits["max_age_s"])
    assert vouched == wire.intake(doc, **limits)
    batch = wire.parse_batch(doc, **limits)
    assert (vouched.batch_id, vouched.n, vouched.gpus) == (batch.batch_id, 80, list(range(8)))


@pytest.mark.parametrize("mutate", [
    lambda c: c["ts"].__setitem__(2, c["ts"][0]),  # GPU 0 read twice at one instant
    lambda c: c["power_w"].__setitem__(5, 10_001.0),
    lambda c: c["energy_mj"].__setitem__(0, -1),
    lambda c: c["energy_method"].__setitem__(1, "joules"),
    lambda c: c.__setitem__("extra", [0] * len(c["ts"])),
], ids=["same instant", "power", "energy_mj", "method", "unknown column"])
def test_intake_names_the_same_field_as_parse_batch(mutate):
    doc = _sorted_by_tick(make_batch(n_per_gpu=3, gpus=(0, 1), start=NOW_S - 100))
    assert _same_answer(doc)[0] == "ok"
    mutate(doc["samples"])
    assert _same_answer(doc)[0] == "error"


def test_intake_answers_every_columns_bounds_as_parse_batch_does():
    """Each column at and just past its bounds, and a NaN or an infinity (a caller that builds
    the document itself), in each row of an agent-ordered batch with every optional column:
    answers the property test above draws only now and then."""
    base = _sorted_by_tick(make_batch(n_per_gpu=2, gpus=(0, 1), start=NOW_S - 100))
    n = len(base["samples"]["ts"])
    for name in wire.OPTIONAL_COLUMNS:
        base["samples"][name] = [0 if name == wire.THROTTLE_FIELD else 1.0] * n
    answers = set()
    for name, values in EDGES.items():
        for value in [*values, math.nan, math.inf, -math.inf]:
            for row in range(n):
                doc = {**base, "samples": {k: list(v) for k, v in base["samples"].items()}}
                doc["samples"][name][row] = value
                answers.add(_same_answer(doc)[0])
    assert answers == {"ok", "error"}
