"""The agent's batch format (wire format v1): parsing and validation.

A batch is columnar JSON -- one array per field -- so validation and conversion run over whole
arrays in numpy instead of building a Python object per sample. That is what lets ingest keep up
with PostgreSQL COPY. Everything here is pure: no database, no HTTP.
"""

from __future__ import annotations

import itertools
import math
import operator
import uuid
from dataclasses import dataclass

import numpy as np

from greenops.errors import FieldError, invalid

# dcgm: read from dcgm-exporter; amd-smi, neuron-monitor, tegrastats: the other accelerators
# (issue 33). All measured; only "simulated" marks samples simulated.
SOURCES = ("nvml", "simulated", "dcgm", "amd-smi", "neuron-monitor", "tegrastats")
# "counter_gap": a counter delta across an agent restart (collectors/energy.py, rule 5).
ENERGY_METHODS = {None: 0, "counter": 1, "power": 2, "counter_gap": 3}

# field -> (nullable, integer, lower bound, upper bound). Bounds are physical plausibility limits:
# anything outside them is a broken reading, and storing it would poison every KPI built on it.
FLOAT_FIELDS: dict[str, tuple[float, float]] = {
    "util_pct": (0.0, 100.0),
    "mem_used_mib": (0.0, 16 * 1024 * 1024.0),
    "power_w": (0.0, 10_000.0),
    "energy_j": (0.0, 10_000.0 * 3600),
    "temp_c": (-50.0, 150.0),
    "sm_clock_mhz": (0.0, 10_000.0),
}
REQUIRED_COLUMNS = ("ts", "gpu_index", *FLOAT_FIELDS, "energy_mj", "energy_method")
# Bottleneck metrics (issue 14): optional, so an agent older than them still ships. An absent
# column is stored as null (unknown), exactly like a metric the GPU does not support.
OPTIONAL_FLOAT_FIELDS: dict[str, tuple[float, float]] = {
    "mem_util_pct": (0.0, 100.0),
    "mem_clock_mhz": (0.0, 100_000.0),
    "pcie_tx_kib_s": (0.0, 1e9),  # KiB/s; PCIe 6.0 x16 is about 1.2e8 KiB/s
    "pcie_rx_kib_s": (0.0, 1e9),
    "power_limit_w": (0.0, 10_000.0),
    # DCGM profiling fields (dcgm-exporter's DCGM_FI_PROF_*, ratios sent as %).
    "sm_active_pct": (0.0, 100.0),
    "sm_occupancy_pct": (0.0, 100.0),
    "tensor_active_pct": (0.0, 100.0),
    "dram_active_pct": (0.0, 100.0),
    "nvlink_tx_kib_s": (0.0, 1e10),  # KiB/s, all links; NVLink 5 is about 1.8e9 KiB/s a GPU
    "nvlink_rx_kib_s": (0.0, 1e10),
}
THROTTLE_FIELD = "throttle_reasons"  # nvmlClocksThrottleReason* bitmask, 0 <= value < 2**32
OPTIONAL_COLUMNS = (*OPTIONAL_FLOAT_FIELDS, THROTTLE_FIELD)


@dataclass
class Batch:
    batch_id: uuid.UUID
    agent_version: str
    source: str
    n: int
    ts_us: np.ndarray  # int64 microseconds since the Unix epoch
    gpu_index: np.ndarray  # int64
    floats: dict[str, np.ndarray]  # float64, NaN where the agent sent null
    energy_mj: np.ndarray  # int64, 0 where null
    energy_mj_null: np.ndarray  # bool
    energy_method: np.ndarray  # int16, 0 where null
    throttle_reasons: np.ndarray  # int64, 0 where null (an absent column: all null)
    throttle_null: np.ndarray  # bool


def json_int(value):
    """`value` as an int where JSON Schema's "integer" counts it as one (3 and 3.0, not true
    or 3.5); anything else as it is, for the caller's check to refuse. An OpenAPI schema cannot
    tell 3.0 from 3, so an API that refused 3.0 refused what its schema allows."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


def nul_at(value, path: str = "") -> str | None:
    """The path of the first key or text holding a NUL (hardware.gpus[0].name), which neither
    PostgreSQL text nor jsonb can store; None when there is none."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, list):
        return next((p for i, v in enumerate(value) if (p := nul_at(v, f"{path}[{i}]"))), None)
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else key
            if "\x00" in key or (here := nul_at(item, here)):
                return here
    return None


def _first_bad(values: list, ok) -> int:
    return next(i for i, v in enumerate(values) if not ok(v))


def _is_number(v) -> bool:
    return type(v) in (int, float)


def numeric_column(name: str, values: list, *, nullable: bool, integer: bool) -> np.ndarray:
    """Type-check a JSON array in C-speed passes and convert it; name the first bad element."""
    field = f"samples.{name}"
    allowed = {int} if integer else {int, float}
    if nullable:
        allowed = allowed | {type(None)}
    kinds = set(map(type, values))
    if integer and float in kinds:  # 3.0 is the integer 3 in JSON Schema; 3.5 is refused below
        values = list(map(json_int, values))
        kinds = set(map(type, values))
    if not kinds <= allowed:
        if integer and nullable:
            def ok(v):
                return v is None or type(v) is int
        elif integer:
            def ok(v):
                return type(v) is int
        elif nullable:
            def ok(v):
                return v is None or _is_number(v)
        else:
            ok = _is_number
        i = _first_bad(values, ok)
        want = "an integer" if integer else "a number"
        raise invalid(f"{field}[{i}]", f"must be {want}{' or null' if nullable else ''}, "
                      f"got {type(values[i]).__name__}")
    if integer:
        if type(None) in kinds:
            mask = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
            filled = [0 if v is None else v for v in values]
        else:
            mask, filled = None, values
        try:
            arr = np.array(filled, dtype=np.int64)
        except OverflowError:
            i = _first_bad(values, lambda v: v is None or -(2**63) <= v < 2**63)
            raise invalid(f"{field}[{i}]", "integer out of range") from None
        return (arr, mask) if nullable else arr
    arr = np.array(values, dtype=np.float64)  # null -> NaN
    if type(None) not in kinds:
        bad = ~np.isfinite(arr)
        if bad.any():
            raise invalid(f"{field}[{int(np.argmax(bad))}]", "NaN and infinities are not allowed")
    else:
        bad = np.isinf(arr)
        if bad.any():
            raise invalid(f"{field}[{int(np.argmax(bad))}]", "NaN and infinities are not allowed")
    return arr


def check_range(name: str, arr: np.ndarray, lo: float, hi: float) -> None:
    """Refuse the first value outside [lo, hi], naming samples.<name>[i]. Public with
    numeric_column: the host-energy batch (carbon.host_energy) uses the same columnar format."""
    with np.errstate(invalid="ignore"):
        bad = (arr < lo) | (arr > hi)
    if bad.any():
        i = int(np.argmax(bad))
        # float(): under numpy 2 the repr of a numpy scalar is "np.float64(-0.5)".
        raise invalid(f"samples.{name}[{i}]", f"{float(arr[i])!r} is outside [{lo:g}, {hi:g}]")


def distinct_timestamps(values: list, n: int, now_s: float, max_age_s: float,
                        max_future_s: float) -> np.ndarray:
    """The `ts` column of a host-level batch (host energy, host activity: one series per host):
    present, finite, inside the intake window and no two samples in the same microsecond."""
    ts = numeric_column("ts", values, nullable=False, integer=False)
    check_range("ts", ts, now_s - max_age_s, now_s + max_future_s)
    if np.unique(np.round(ts * 1e6)).size != n:
        raise invalid("samples.ts", "two samples share a timestamp")
    return ts


def parse_batch_id(doc: dict) -> uuid.UUID:
    """The batch's id, fixed by the sender so a resend is recognised."""
    raw = doc.get("batch_id")
    if isinstance(raw, str):
        try:
            return uuid.UUID(raw)
        except ValueError:
            pass
    raise invalid("batch_id", "must be a UUID string")


def text_field(doc: dict, key: str, max_len: int, required: bool = False) -> str:
    """A short string field; NUL is refused because PostgreSQL text cannot hold it."""
    value = doc.get(key, None if required else "")
    if (not isinstance(value, str) or len(value) > max_len or "\x00" in value
            or (required and not value)):
        raise invalid(key, f"must be a{' non-empty' if required else ''} string of at most "
                      f"{max_len} characters")
    return value


def sample_columns(doc: dict, columns, max_samples: int, optional=()) -> tuple[dict, int]:
    """The columnar `samples` object: every column present (``optional`` ones may be absent),
    nothing unknown, all the same length, and not more than max_samples rows. Returns the
    columns and the row count."""
    samples = doc.get("samples")
    if not isinstance(samples, dict):
        raise invalid("samples", "must be an object of equal-length arrays")
    for name in columns:
        if not isinstance(samples.get(name), list):
            raise invalid(f"samples.{name}", "is required and must be an array")
    for name in optional:
        if name in samples and not isinstance(samples[name], list):
            raise invalid(f"samples.{name}", "must be an array")
    unknown = set(samples) - set(columns) - set(optional)
    if unknown:
        raise invalid(f"samples.{sorted(unknown)[0]}", "is not a known field")
    n = len(samples["ts"])
    if n == 0:
        raise invalid("samples.ts", "the batch holds no samples")
    if n > max_samples:
        raise FieldError(413, "too_many_samples", "samples.ts",
                          f"{n} samples; a batch may hold at most {max_samples}")
    for name in (*columns, *(o for o in optional if o in samples)):
        if len(samples[name]) != n:
            raise invalid(f"samples.{name}", f"has {len(samples[name])} elements, ts has {n}")
    return samples, n


def parse_batch(
    doc,
    *,
    now_s: float,
    max_samples: int,
    max_future_s: float,
    max_age_s: float,
) -> Batch:
    if not isinstance(doc, dict):
        raise invalid("", "the batch must be a JSON object")
    batch_id = parse_batch_id(doc)
    agent_version = text_field(doc, "agent_version", 32)
    sent_at = doc.get("sent_at")
    if sent_at is not None and (type(sent_at) not in (int, float) or not math.isfinite(sent_at)):
        raise invalid("sent_at", "must be Unix seconds (a number)")
    source = doc.get("source")
    if source not in SOURCES:
        raise invalid("source", f"must be one of {', '.join(SOURCES)}")
    samples, n = sample_columns(doc, REQUIRED_COLUMNS, max_samples, OPTIONAL_COLUMNS)

    ts = numeric_column("ts", samples["ts"], nullable=False, integer=False)
    too_new = ts > now_s + max_future_s
    if too_new.any():
        i = int(np.argmax(too_new))
        raise invalid(f"samples.ts[{i}]", f"is {ts[i] - now_s:.0f} s in the future; "
                      "check the host's clock")
    too_old = ts < now_s - max_age_s
    if too_old.any():
        i = int(np.argmax(too_old))
        raise invalid(f"samples.ts[{i}]", f"is older than {max_age_s / 86400:g} days")
    gpu_index = numeric_column("gpu_index", samples["gpu_index"], nullable=False, integer=True)
    bad = (gpu_index < 0) | (gpu_index > 1023)
    if bad.any():
        i = int(np.argmax(bad))
        raise invalid(f"samples.gpu_index[{i}]", "must be between 0 and 1023")

    floats = _float_columns(samples, n)
    throttle, throttle_null = throttle_column(samples.get(THROTTLE_FIELD), n)

    energy_mj, mj_null = numeric_column("energy_mj", samples["energy_mj"], nullable=True,
                                         integer=True)
    if mj_null is None:
        mj_null = np.zeros(n, dtype=bool)
    if (energy_mj < 0).any():
        i = int(np.argmax(energy_mj < 0))
        raise invalid(f"samples.energy_mj[{i}]", "must not be negative")

    methods = samples["energy_method"]
    try:
        method = np.array(list(map(ENERGY_METHODS.__getitem__, methods)), dtype=np.int16)
    except (KeyError, TypeError):
        i = _first_bad(methods, lambda m: isinstance(m, (str, type(None))) and m in ENERGY_METHODS)
        raise invalid(f"samples.energy_method[{i}]",
                      "must be \"counter\", \"power\", \"counter_gap\" or null") from None

    ts_us = np.round(ts * 1_000_000).astype(np.int64)
    # Two readings of one GPU at the same instant would collide on the natural key; inside a
    # batch that can only be an agent bug, so say so instead of silently keeping one.
    if not _keys_unique(ts_us, gpu_index):
        raise invalid("samples.ts", "two samples of the same GPU share a timestamp")
    return Batch(batch_id, agent_version, source, n, ts_us, gpu_index, floats, energy_mj, mj_null,
                 method, throttle, throttle_null)


@dataclass(frozen=True)
class Intake:
    """What the web needs of a batch it accepts (the worker parses the stored body itself): its
    id, agent version, sample count, each sample's GPU index and those indices sorted and
    distinct."""

    batch_id: uuid.UUID
    agent_version: str
    n: int
    gpu_index: list[int]
    gpus: list[int]


def intake(doc, *, now_s: float, max_samples: int, max_future_s: float,
           max_age_s: float) -> Intake:
    """Validate a batch as parse_batch does and return its Intake, without building arrays.

    The API validates every batch it receives, and only the worker needs its values. At the
    agent's 80 samples per POST, parse_batch's fixed cost (some forty numpy calls) was most of
    the web's validation CPU, so a batch is first checked in a few C-speed passes over each
    column's list (types, finiteness, bounds, key order). What passes them passes parse_batch;
    anything else -- an error, or a valid batch these passes cannot vouch for (samples not in
    the agent's tick-major order, a NaN standing for null, an integer written as 3.0) -- goes
    through parse_batch, which names the error or accepts it. Both paths answer the same:
    tests/telemetry/test_wire_properties.py."""
    summary = _vouch(doc, now_s, max_samples, max_future_s, max_age_s)
    if summary is not None:
        return summary
    batch = parse_batch(doc, now_s=now_s, max_samples=max_samples, max_future_s=max_future_s,
                        max_age_s=max_age_s)
    return Intake(batch.batch_id, batch.agent_version, batch.n, batch.gpu_index.tolist(),
                  np.unique(batch.gpu_index).tolist())


_REQUIRED = frozenset(REQUIRED_COLUMNS)
_KNOWN = frozenset((*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS))
_NUMBER = frozenset({int, float})
_INT_OR_NULL = frozenset({int, type(None)})
_METHODS = frozenset(ENERGY_METHODS)


def _finite_within(values, lo: float, hi: float) -> bool:
    """All values (numbers) finite and within [lo, hi]. A NaN or an infinity makes the sum NaN
    or infinite; a sum that overflows only sends the batch the slow way."""
    try:
        return math.isfinite(sum(values)) and lo <= min(values) and max(values) <= hi
    except OverflowError:  # an integer too large for a float
        return False


def _vouch(doc, now_s, max_samples, max_future_s, max_age_s) -> Intake | None:
    """The Intake of a batch these passes prove parse_batch accepts; None when they cannot."""
    if type(doc) is not dict:
        return None
    samples = doc.get("samples")
    raw_id, version = doc.get("batch_id"), doc.get("agent_version", "")
    sent_at = doc.get("sent_at")
    if (type(samples) is not dict or type(raw_id) is not str or type(version) is not str
            or len(version) > 32 or "\x00" in version or doc.get("source") not in SOURCES
            or not (sent_at is None or (type(sent_at) in _NUMBER and math.isfinite(sent_at)))):
        return None
    names = samples.keys()
    if not names >= _REQUIRED or not names <= _KNOWN:
        return None
    ts = samples["ts"]
    n = len(ts) if type(ts) is list else 0
    if not 0 < n <= max_samples:
        return None
    for values in samples.values():
        if type(values) is not list or len(values) != n:
            return None
    if not set(map(type, ts)) <= _NUMBER or not _finite_within(
            ts, now_s - max_age_s, now_s + max_future_s):
        return None
    gpu = samples["gpu_index"]
    if set(map(type, gpu)) != {int} or min(gpu) < 0 or max(gpu) > 1023:
        return None
    for name, (lo, hi) in _FLOAT_BOUNDS.items():
        values = samples.get(name)
        if values is None:
            continue
        kinds = set(map(type, values))
        if type(None) in kinds:
            kinds.discard(type(None))
            values = [v for v in values if v is not None]
        if not kinds <= _NUMBER or (values and not _finite_within(values, lo, hi)):
            return None
    for name, hi in (("energy_mj", 2**63 - 1), (THROTTLE_FIELD, 2**32 - 1)):
        values = samples.get(name)
        if values is None:
            continue
        kinds = set(map(type, values))
        if not kinds <= _INT_OR_NULL:
            return None
        if type(None) in kinds:
            values = [v for v in values if v is not None]
        if values and (min(values) < 0 or max(values) > hi):
            return None
    try:
        if not set(samples["energy_method"]) <= _METHODS:
            return None
    except TypeError:  # an unhashable element (a list, an object)
        return None
    # The agent's order, every GPU once per tick: (ts in microseconds, gpu) strictly increasing
    # proves no two samples of a GPU share a timestamp, as parse_batch's check would.
    keys = list(zip([round(t * 1e6) for t in ts], gpu, strict=True))
    if not all(map(operator.lt, keys, itertools.islice(keys, 1, None))):
        return None
    try:
        batch_id = uuid.UUID(raw_id)
    except ValueError:
        return None
    return Intake(batch_id, version, n, gpu, sorted(set(gpu)))


def parse_validated(doc: dict) -> Batch:
    """A batch parse_batch accepted before (the worker reading back a body the API stored):
    the same Batch, built without checking it again. The API refuses a batch unless every check
    passes and keeps the body unchanged, so a stored body is valid by construction; checking it
    a second time was a third of the worker's Python CPU per 80-sample batch."""
    samples = doc["samples"]
    n = len(samples["ts"])
    ts_us = np.round(np.array(samples["ts"], dtype=np.float64) * 1_000_000).astype(np.int64)
    names = [name for name in _FLOAT_BOUNDS if name in samples]
    matrix = np.array([samples[name] for name in names], dtype=np.float64)  # null -> NaN
    given = dict(zip(names, matrix, strict=True))
    # The columns the agent did not send share one read-only all-null array: a column per
    # absent metric was 12 np.full calls per batch, a sixth of this function's time.
    absent = None
    if len(given) < len(_FLOAT_BOUNDS):
        absent = np.full(n, np.nan)
        absent.flags.writeable = False
    floats = {name: given.get(name, absent) for name in _FLOAT_BOUNDS}
    energy_mj, mj_null = numeric_column("energy_mj", samples["energy_mj"], nullable=True,
                                         integer=True)
    throttle, throttle_null = throttle_column(samples.get(THROTTLE_FIELD), n)
    method = np.array(list(map(ENERGY_METHODS.__getitem__, samples["energy_method"])),
                      dtype=np.int16)
    return Batch(uuid.UUID(doc["batch_id"]), doc.get("agent_version", ""), doc["source"], n,
                 ts_us, np.array(samples["gpu_index"], dtype=np.int64), floats, energy_mj,
                 np.zeros(n, dtype=bool) if mj_null is None else mj_null, method, throttle,
                 throttle_null)


_FLOAT_BOUNDS = {**FLOAT_FIELDS, **OPTIONAL_FLOAT_FIELDS}
_NUMBER_OR_NULL = frozenset({int, float, type(None)})


def _float_columns(samples: dict, n: int) -> dict[str, np.ndarray]:
    """Every float column, NaN for null (an absent optional column: all NaN), validated as
    numeric_column and check_range validate one column at a time -- but as one matrix, in a
    handful of numpy calls instead of four per column: at the agent's 80 samples per batch the
    calls' fixed cost, not the values, was most of the web's validation CPU. A batch the matrix
    finds anything wrong with (a type, a range, a NaN that was not a null) is checked again one
    column at a time, so the error named is the one the column-by-column check finds first."""
    names = [name for name in _FLOAT_BOUNDS if name in samples]
    columns = [samples[name] for name in names]
    matrix = None
    if set(map(type, itertools.chain.from_iterable(columns))) <= _NUMBER_OR_NULL:
        try:
            matrix = np.array(columns, dtype=np.float64)  # null -> NaN
        except (OverflowError, ValueError):  # an int too large for a float: named below
            matrix = None
    if matrix is not None:
        bounds = np.array([_FLOAT_BOUNDS[name] for name in names])
        lo, hi = bounds[:, :1], bounds[:, 1:]  # (k, 1): broadcast over each column's row
        with np.errstate(invalid="ignore"):  # NaN compares False: nulls are in range
            bad = (matrix < lo) | (matrix > hi)  # +-inf is out of range too
        if not bad.any() and _nan_only_for_null(matrix, columns):
            given = dict(zip(names, matrix, strict=True))
            absent = [name for name in _FLOAT_BOUNDS if name not in given]
            given.update(zip(absent, np.full((len(absent), n), np.nan), strict=True))
            return {name: given[name] for name in _FLOAT_BOUNDS}
    floats = {}
    for name, (lo, hi) in _FLOAT_BOUNDS.items():
        if name in samples:
            arr = numeric_column(name, samples[name], nullable=True, integer=False)
            check_range(name, arr, lo, hi)
        else:  # only optional columns may be absent (sample_columns)
            arr = np.full(n, np.nan)
        floats[name] = arr
    return floats


def _nan_only_for_null(matrix: np.ndarray, columns: list[list]) -> bool:
    """Every NaN in the matrix stands for a JSON null, not for a NaN float the caller put in."""
    nans = int(np.isnan(matrix).sum())
    return nans == 0 or nans == sum(column.count(None) for column in columns)


def throttle_column(values: list | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The throttle-reason bitmask column; absent means unknown for every sample. Public for
    store.GroupColumns, which reads a group's joined column with it."""
    if values is None:
        return np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)
    arr, null = numeric_column(THROTTLE_FIELD, values, nullable=True, integer=True)
    if null is None:
        null = np.zeros(n, dtype=bool)
    bad = (arr < 0) | (arr >= 2**32)
    if bad.any():
        i = int(np.argmax(bad))
        raise invalid(f"samples.{THROTTLE_FIELD}[{i}]", "must be an NVML throttle-reason "
                      "bitmask between 0 and 2**32 - 1")
    return arr, null


def _keys_unique(ts_us: np.ndarray, gpu_index: np.ndarray) -> bool:
    """No two samples share (gpu, ts). Agents send tick-major batches (every GPU once per tick,
    in index order), for which (ts, gpu) as one integer is strictly increasing: one O(n) pass
    proves that. Anything else takes the general hash-based check."""
    rel = ts_us - ts_us.min()
    if rel.size > 1 and int(rel.max()) < (1 << 52):  # gpu_index < 1024, so no int64 overflow
        key = rel * 1024 + gpu_index
        if bool((key[1:] > key[:-1]).all()):
            return True
    key = gpu_index * (1 << 52) + rel
    return bool(np.unique(key).size == key.size)


def check_gpu_indices(batch: Batch | Intake, known: set[int]) -> None:
    indices = batch.gpu_index
    if isinstance(indices, np.ndarray):
        indices = indices.tolist()
    unknown = sorted(set(indices) - known)
    if unknown:
        i = indices.index(unknown[0])
        raise invalid(f"samples.gpu_index[{i}]",
                      f"GPU {unknown[0]} is not registered for this host; "
                      "the agent registers GPUs through POST /api/v1/inventory")


def parse_spool_report(doc: dict) -> tuple[int, float | None] | None:
    """Optional top-level ``"spool": {"depth": N, "oldest_age_s": S}``: the agent's backlog
    when it sent this batch (for the host list's spool lag). Absent in older agents."""
    spool = doc.get("spool")
    if spool is None:
        return None
    if not isinstance(spool, dict):
        raise invalid("spool", "must be an object")
    depth, age = json_int(spool.get("depth")), spool.get("oldest_age_s")
    if type(depth) is not int or not 0 <= depth < 2**31:
        raise invalid("spool.depth", "must be a non-negative integer")
    if age is not None and (not _is_number(age) or not 0 <= age < 10 * 365 * 86400):
        raise invalid("spool.oldest_age_s", "must be a non-negative number of seconds or null")
    return depth, None if age is None else float(age)
