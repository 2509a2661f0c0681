"""Writing a validated batch: raw samples plus the minute and hour rollups, exactly once.

PostgreSQL: the batch becomes a binary COPY stream built with numpy (no Python object per
sample), lands in a temporary staging table, and one statement moves it into the samples table
with ON CONFLICT DO NOTHING while folding only the rows that were really inserted into the
rollups. A replayed batch therefore changes nothing.
SQLite (the embedded default): an idempotent bulk insert, then the touched buckets are recomputed
from raw samples.
"""

from __future__ import annotations

import weakref

import numpy as np
import psycopg
from django.conf import settings
from django.db import IntegrityError, connection, transaction

from greenops.errors import FieldError
from greenops.telemetry import wire
from greenops.telemetry.wire import Batch

PG_EPOCH_OFFSET_US = 946_684_800 * 1_000_000  # 1970-01-01 -> 2000-01-01
COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
COPY_TRAILER = b"\xff\xff"

# Column order of the COPY stream and the big-endian binary type of each.
SAMPLE_COLUMNS: list[tuple[str, str]] = [
    ("gpu_id", ">i8"),
    ("ts", ">i8"),
    ("util_pct", ">f8"),
    ("mem_used_mib", ">f8"),
    ("power_w", ">f8"),
    ("energy_mj", ">i8"),
    ("energy_j", ">f8"),
    ("energy_method", ">i2"),
    ("temp_c", ">f8"),
    ("sm_clock_mhz", ">f8"),
    ("simulated", "?"),
    ("mem_util_pct", ">f8"),
    ("mem_clock_mhz", ">f8"),
    ("pcie_tx_kib_s", ">f8"),
    ("pcie_rx_kib_s", ">f8"),
    ("throttle_reasons", ">i8"),
    ("power_limit_w", ">f8"),
    ("sm_active_pct", ">f8"),
    ("sm_occupancy_pct", ">f8"),
    ("tensor_active_pct", ">f8"),
    ("dram_active_pct", ">f8"),
    ("nvlink_tx_kib_s", ">f8"),
    ("nvlink_rx_kib_s", ">f8"),
]
# nvmlClocksThrottleReason* bits, as the agent defines them (collectors/sources.py).
THROTTLE_POWER_MASK = 0x4 | 0x80
THROTTLE_THERMAL_MASK = 0x20 | 0x40
# Every rollup column: the aggregate that makes it from samples, and how two partial aggregates
# of one bucket merge ("sum", "max" or "min"; NULL-skipping, as greatest/least are). A count of 0
# is "not reported". The merge is what lets a batch fold into rows already there, and an hour or
# day be made from the batch's minutes instead of from its samples again.
_ROLLUP_BASE: list[tuple[str, str, str]] = [
    ("samples", "count(*)", "sum"),
    ("util_sum", "coalesce(sum(util_pct), 0)", "sum"),
    ("util_n", "count(util_pct)", "sum"),
    ("util_max", "max(util_pct)", "max"),
    ("power_sum_w", "coalesce(sum(power_w), 0)", "sum"),
    ("power_n", "count(power_w)", "sum"),
    ("power_max_w", "max(power_w)", "max"),
    ("mem_used_max_mib", "max(mem_used_mib)", "max"),
    ("temp_max_c", "max(temp_c)", "max"),
    ("energy_j", "coalesce(sum(energy_j), 0)", "sum"),
    ("simulated_samples", "count(*) FILTER (WHERE simulated)", "sum"),
]


def _paired_sum(value: str, other: str) -> str:
    """Sum of `value` over samples that report both halves of a pair (tx/rx)."""
    return f"coalesce(sum(CASE WHEN {other} IS NOT NULL THEN {value} END), 0)"


def _both(a: str, b: str) -> str:
    return f"count(CASE WHEN {a} IS NOT NULL AND {b} IS NOT NULL THEN 1 END)"


_MEANS: list[tuple[str, str, str]] = []  # (sum column, count column, sample column)


def _mean_parts(total: str, n: str, column: str) -> list[tuple[str, str, str]]:
    _MEANS.append((total, n, column))
    return [(total, f"coalesce(sum({column}), 0)", "sum"), (n, f"count({column})", "sum")]


# Written with CASE rather than FILTER so SQLite takes the same aggregates (_SQLITE_AGGREGATES).
_ROLLUP_NEW: list[tuple[str, str, str]] = [
    *_mean_parts("mem_util_sum", "mem_util_n", "mem_util_pct"),
    ("pcie_tx_sum_kib_s", _paired_sum("pcie_tx_kib_s", "pcie_rx_kib_s"), "sum"),
    ("pcie_rx_sum_kib_s", _paired_sum("pcie_rx_kib_s", "pcie_tx_kib_s"), "sum"),
    ("pcie_n", _both("pcie_tx_kib_s", "pcie_rx_kib_s"), "sum"),
    ("throttle_n", "count(throttle_reasons)", "sum"),
    ("power_capped_samples",
     f"coalesce(sum(CASE WHEN (throttle_reasons & {THROTTLE_POWER_MASK}) <> 0 THEN 1 END), 0)",
     "sum"),
    ("thermal_samples",
     f"coalesce(sum(CASE WHEN (throttle_reasons & {THROTTLE_THERMAL_MASK}) <> 0 THEN 1 END), 0)",
     "sum"),
    ("power_limit_min_w", "min(power_limit_w)", "min"),
    *_mean_parts("sm_active_sum", "sm_active_n", "sm_active_pct"),
    *_mean_parts("sm_occupancy_sum", "sm_occupancy_n", "sm_occupancy_pct"),
    *_mean_parts("tensor_active_sum", "tensor_active_n", "tensor_active_pct"),
    *_mean_parts("dram_active_sum", "dram_active_n", "dram_active_pct"),
    ("nvlink_tx_sum_kib_s", _paired_sum("nvlink_tx_kib_s", "nvlink_rx_kib_s"), "sum"),
    ("nvlink_rx_sum_kib_s", _paired_sum("nvlink_rx_kib_s", "nvlink_tx_kib_s"), "sum"),
    ("nvlink_n", _both("nvlink_tx_kib_s", "nvlink_rx_kib_s"), "sum"),
    *_mean_parts("sm_clock_sum_mhz", "sm_clock_n", "sm_clock_mhz"),
    *_mean_parts("mem_clock_sum_mhz", "mem_clock_n", "mem_clock_mhz"),
]
_ROLLUP_ALL = _ROLLUP_BASE + _ROLLUP_NEW
COLUMN_LIST = ", ".join(name for name, _ in SAMPLE_COLUMNS)


def batch_columns(batch: Batch, gpu_ids: dict[int, int]) -> tuple[dict, dict]:
    """Native numpy columns plus null masks, with GPU indices mapped to database ids."""
    lookup = np.zeros(int(batch.gpu_index.max()) + 1, dtype=np.int64)
    for index, gpu_id in gpu_ids.items():
        if index < lookup.size:
            lookup[index] = gpu_id
    values = {
        "gpu_id": lookup[batch.gpu_index],
        "ts": batch.ts_us,
        "energy_mj": batch.energy_mj,
        "energy_method": batch.energy_method,
        "simulated": np.full(batch.n, batch.source == "simulated"),
    }
    values["throttle_reasons"] = batch.throttle_reasons
    nulls: dict[str, np.ndarray] = {
        "energy_mj": batch.energy_mj_null,
        "energy_method": batch.energy_method == 0,
        "throttle_reasons": batch.throttle_null,
    }
    masks: dict[int, np.ndarray] = {}  # columns may share one array (wire.parse_validated)
    for name, arr in batch.floats.items():
        values[name] = arr
        if id(arr) not in masks:
            masks[id(arr)] = np.isnan(arr)
        nulls[name] = masks[id(arr)]
    return values, nulls


def copy_binary(values: dict, nulls: dict, n: int,
                columns: list[tuple[str, str]] = SAMPLE_COLUMNS) -> bytes:
    """PostgreSQL binary COPY rows, built a null-pattern at a time.

    Rows that share the same set of NULL columns have a fixed layout, so each group is one numpy
    structured array. A fleet has few patterns (a GPU model either reports a metric or not), and
    a group of one agent's batches mostly one: then the columns go in as they are, without
    selecting each one's rows of the pattern (a copy of every column).
    """
    masked = [(bit, mask) for bit, (name, _) in enumerate(columns)
              if (mask := nulls.get(name)) is not None and mask.any()]
    code = np.zeros(n, dtype=np.int64)
    for bit, mask in masked:
        code |= mask.astype(np.int64) << bit
    patterns = np.unique(code).tolist() if masked else [0]
    parts = [COPY_HEADER]
    for pattern in patterns:
        sel = code == pattern if len(patterns) > 1 else None
        fields: list[tuple[str, str]] = [("nfields", ">i2")]
        for bit, (name, dtype) in enumerate(columns):
            fields.append((name + "__len", ">i4"))
            if not (pattern >> bit) & 1:
                fields.append((name, dtype))
        rows = np.empty(n if sel is None else int(sel.sum()), dtype=np.dtype(fields))
        rows["nfields"] = len(columns)
        for bit, (name, dtype) in enumerate(columns):
            if (pattern >> bit) & 1:
                rows[name + "__len"] = -1
            else:
                rows[name + "__len"] = np.dtype(dtype).itemsize
                column = values[name] if sel is None else values[name][sel]
                rows[name] = column - PG_EPOCH_OFFSET_US if name == "ts" else column
        parts.append(rows.tobytes())
    parts.append(COPY_TRAILER)
    return b"".join(parts)


_MERGE_SET = {"sum": "{c} = r.{c} + excluded.{c}", "max": "{c} = greatest(r.{c}, excluded.{c})",
              "min": "{c} = least(r.{c}, excluded.{c})"}
_ROLLUP_COLUMNS = ", ".join(c for c, _, _ in _ROLLUP_ALL)

# The batch's samples aggregated once, per GPU and minute; the minute, hour and day rollups are
# all folded from these rows (an hour's sum is the sum of its minutes' sums, its max the max of
# their maxes), so the samples are read once, not once per rollup table.
def _agg(source: str) -> str:
    return ("SELECT gpu_id, date_trunc('minute', ts) AS bucket, "
            + ", ".join(f"{expr} AS {c}" for c, expr, _ in _ROLLUP_ALL)
            + f" FROM {source} GROUP BY 1, 2")


def rollup_upsert(table: str, unit: str, returning: str = "1") -> str:
    """The INSERT ... ON CONFLICT folding the `agg` minutes into one rollup table. The hour and
    day tables also add up the changes of their minutes' util/idle state (the `flips` CTE)."""
    sets = ",\n        ".join(_MERGE_SET[merge].format(c=c) for c, _, merge in _ROLLUP_ALL)
    if unit == "minute":
        return (f"INSERT INTO {table} AS r (gpu_id, bucket, {_ROLLUP_COLUMNS})\n"
                f"    SELECT gpu_id, bucket, {_ROLLUP_COLUMNS} FROM agg ORDER BY 1, 2\n"
                f"    ON CONFLICT (gpu_id, bucket) DO UPDATE SET\n        {sets}\n"
                f"    RETURNING {returning}")
    merged = ", ".join(f"{merge}({c})" for c, _, merge in _ROLLUP_ALL)
    return (f"INSERT INTO {table} AS r (gpu_id, bucket, {_ROLLUP_COLUMNS}, util_minutes, "
            f"idle_minutes)\n"
            f"    SELECT gpu_id, date_trunc('{unit}', bucket), {merged}, "
            f"coalesce(sum(f_util), 0), coalesce(sum(f_idle), 0)\n"
            f"    FROM agg LEFT JOIN flips ON f_gpu = gpu_id AND f_bucket = bucket\n"
            f"    GROUP BY 1, 2 ORDER BY 1, 2\n"
            f"    ON CONFLICT (gpu_id, bucket) DO UPDATE SET\n        {sets},\n"
            f"        util_minutes = r.util_minutes + excluded.util_minutes,\n"
            f"        idle_minutes = r.idle_minutes + excluded.idle_minutes\n"
            f"    RETURNING {returning}")


# A GPU-minute is idle when its mean utilisation is under this (greenops.costs.accounting uses
# the hour/day counts below only at this threshold; another one is counted from minutes).
IDLE_UTIL_PCT = 5.0
# Per touched minute, how its state changed: util (a utilisation reported) and idle (reported
# and its mean under IDLE_UTIL_PCT), +1/-1/0, from the minute before this statement to after.
# "Before" is the row as this statement's snapshot saw it when its count matches the row's new
# count less the samples added (nothing else wrote it meanwhile); else, under a concurrent
# writer, the new row less what this statement added.
_FLIPS = f"""
), before AS (
    SELECT o.gpu_id, o.bucket, o.util_sum, o.util_n FROM telemetry_gpuminute o
    WHERE (o.gpu_id, o.bucket) IN (SELECT gpu_id, bucket FROM agg)
), flips AS (
    SELECT m.gpu_id AS f_gpu, m.bucket AS f_bucket,
        (m.util_n > 0)::int - (m.util_n - a.util_n > 0)::int AS f_util,
        (m.util_n > 0 AND m.util_sum < m.util_n * {IDLE_UTIL_PCT})::int
        - (CASE WHEN m.util_n - a.util_n = 0 THEN false
                WHEN b.util_n = m.util_n - a.util_n THEN b.util_sum < b.util_n * {IDLE_UTIL_PCT}
                ELSE m.util_sum - a.util_sum < (m.util_n - a.util_n) * {IDLE_UTIL_PCT}
           END)::int AS f_idle
    FROM m JOIN agg a ON a.gpu_id = m.gpu_id AND a.bucket = m.bucket
    LEFT JOIN before b ON b.gpu_id = m.gpu_id AND b.bucket = m.bucket"""


def _fold(source: str, agg: str | None = None) -> str:
    """The CTEs after `ins` that fold `source`'s samples into the minute, hour and day rollups
    (`agg`: the samples' minutes already aggregated, instead of aggregating `source`)."""
    return f"""
), agg AS ({agg or _agg(source)}
), m AS ({rollup_upsert("telemetry_gpuminute", "minute",
                       returning="r.gpu_id, r.bucket, r.util_sum, r.util_n")}{_FLIPS}
), h AS ({rollup_upsert("telemetry_gpuhour", "hour")}
), d AS ({rollup_upsert("telemetry_gpuday", "day")}
)
SELECT count(*) FROM ins
"""


_PG_MOVE = f"""
WITH ins AS (
    INSERT INTO telemetry_gpusample ({COLUMN_LIST})
    SELECT {COLUMN_LIST} FROM gpusample_stage
    ON CONFLICT DO NOTHING
    RETURNING gpu_id, ts, util_pct, power_w, mem_used_mib, temp_c, energy_j, simulated,
        mem_util_pct, pcie_tx_kib_s, pcie_rx_kib_s, throttle_reasons, power_limit_w,
        sm_active_pct, sm_occupancy_pct, tensor_active_pct, dram_active_pct, nvlink_tx_kib_s,
        nvlink_rx_kib_s, sm_clock_mhz, mem_clock_mhz{_fold("ins")}"""


def _new_only(stage: str) -> str:
    """The optimistic form of the move: a plain INSERT of every staged sample (no ON CONFLICT, no
    sort, a one-byte RETURNING) and the rollups folded from the stage itself. Right only when
    every staged sample goes in: otherwise it fails with a unique violation (a sample already
    stored: a resend, two batches of a group carrying one sample, a concurrent writer that
    committed it first) or inserts fewer rows than were staged (the default partition's guard
    drops rows below the retention horizon), and _move_staged rolls it back and runs the ON
    CONFLICT form, which folds only the rows really inserted. Measured on 8,000 staged samples
    (rolled-back inserts into the partitioned samples table, six runs each): ON CONFLICT DO
    NOTHING took 48-59 ms against 31-37 ms for the plain INSERT, RETURNING the 21 columns the
    rollups read added 9 ms and the batch-order sort 4 ms."""
    return f"""
WITH ins AS (
    INSERT INTO telemetry_gpusample ({COLUMN_LIST})
    SELECT {COLUMN_LIST} FROM {stage}
    RETURNING 1{_fold(stage)}"""


_PG_NEW = _new_only("gpusample_stage")

# The group's samples went straight into the samples table (COPY, store_group): their minutes,
# aggregated by the worker (minute_rollups), fold into the rollups from this stage, which the
# statement empties as it reads it (a caller's transaction may hold several groups: the stage
# empties only at its commit).
MINUTE_STAGE = "gpuminute_fold_stage"
_PG_FOLD_MINUTES = f"""
WITH ins AS (
    SELECT 1{_fold("", agg=f"DELETE FROM {MINUTE_STAGE} RETURNING *")}"""


class _NotAllNew(Exception):
    """The optimistic move inserted fewer rows than were staged: undo it (its savepoint)."""


def _move_staged(cursor, staged: int, new_only: str, move: str,
                 params: dict | None = None) -> bool:
    """Run the optimistic statement inside a savepoint; unless it stored all `staged` samples,
    roll it back and run the ON CONFLICT statement instead. True if the optimistic one stored the
    whole stage; False with `move`'s rows waiting in the cursor. Either way no sample is stored
    twice, and the rollups fold exactly the rows that went in (the stage's rows are those rows
    when all of them went in: the only trigger on the samples, the retention guard, keeps a row
    as it is or drops it)."""
    def attempt() -> None:
        cursor.execute(new_only)
        if cursor.fetchone()[0] != staged:
            raise _NotAllNew

    if _in_savepoint(attempt):
        return True
    cursor.execute(move, params)
    return False


def _in_savepoint(attempt) -> bool:
    """Run an optimistic store inside a savepoint: True if it went through; False, the savepoint
    undone, if it met a sample stored already (a unique violation) or stored fewer rows than it
    was given (_NotAllNew: the retention guard dropped some)."""
    try:
        with transaction.atomic(), connection.wrap_database_errors:
            attempt()
        return True
    except IntegrityError as exc:
        if not isinstance(exc.__cause__, psycopg.errors.UniqueViolation):
            raise
    except _NotAllNew:
        pass
    return False


def store_batch(batch: Batch, gpu_ids: dict[int, int]) -> int:
    """Store a batch and fold it into the rollups; return how many samples were new."""
    values, nulls = batch_columns(batch, gpu_ids)
    if connection.vendor == "postgresql":
        return _store_postgres(values, nulls, batch.n)
    return _store_sqlite(values, nulls, batch.n)


# Database connections (psycopg's, so a reconnect starts afresh) whose session is known to have
# the staging table: the worker keeps its connection across tasks, and skipping the CREATE saves
# a round trip and a catalog lookup per batch.
_staged_connections: weakref.WeakSet = weakref.WeakSet()


def prepare_session() -> None:
    """Create the session's staging table ahead of the batch's transaction (the worker calls
    this outside any transaction, so the table then lasts as long as the connection)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            _ensure_stage(cursor)


def _ensure_stage(cursor) -> None:
    raw = connection.connection
    if raw in _staged_connections:
        return
    cursor.execute(
        "CREATE TEMP TABLE IF NOT EXISTS gpusample_stage "
        "(LIKE telemetry_gpusample INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
    )
    # The group-commit stage: the same rows plus the position of the batch they came from.
    cursor.execute(
        "CREATE TEMP TABLE IF NOT EXISTS gpusample_group_stage "
        "(LIKE telemetry_gpusample INCLUDING DEFAULTS, batch_no integer NOT NULL) "
        "ON COMMIT DELETE ROWS"
    )
    # The group's minutes, as _agg makes them from samples (columns and types).
    cursor.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS {MINUTE_STAGE} ON COMMIT DELETE ROWS AS "
        f"{_agg('telemetry_gpusample')} WITH NO DATA"
    )
    # Inside a transaction a rollback could still take the CREATE with it: remember only
    # tables created in autocommit mode.
    if not connection.in_atomic_block:
        _staged_connections.add(raw)


class _PreparingCursor(psycopg.Cursor):
    """A psycopg cursor whose every execute() is a prepared statement: Django's cursor wrapper
    passes no `prepare` argument, so this class supplies it. The POST /samples statement was
    parsed and planned on every request: 0.49 ms of PostgreSQL CPU per 80-sample batch for a
    statement whose execution took 0.19 ms (log_statement_stats, bench/ingest at 80 samples
    per POST)."""

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True if prepare is None else prepare,
                               binary=binary)


# Django turns psycopg's automatic preparation off (None) so that connection poolers work. A
# threshold no statement reaches keeps it off for every other statement and lets prepare=True
# prepare a _PreparingCursor's (None would refuse that too).
NEVER_AUTO_PREPARE = 2**31 - 1


def server_bound_cursor(binary: bool = False, prepare: bool = False, using=None):
    """A Django cursor (wrapped: errors, query log, atomic bookkeeping) over a psycopg cursor
    that binds parameters on the server. Django's default client-side binding quoted a request's
    body into the SQL text in Python, a sixth of the request's CPU; here it travels as one binary
    parameter.

    binary: results in PostgreSQL's binary format too -- for reads of bytea and arrays (the
    team page's stored fleet buckets), which in text come as hex and digits to parse.
    prepare: run the statements as named prepared statements, parsed and planned once per
    connection (_PreparingCursor); off where settings.DB_PREPARED_STATEMENTS is.
    using: the connection (default: the primary's); page reads pass db_router.read_connection()."""
    conn = connection if using is None else using
    conn.ensure_connection()
    raw_connection = conn.connection
    cursor_class = psycopg.Cursor
    if prepare and settings.DB_PREPARED_STATEMENTS:
        if raw_connection.prepare_threshold is None:
            raw_connection.prepare_threshold = NEVER_AUTO_PREPARE
        cursor_class = _PreparingCursor
    raw = cursor_class(raw_connection)
    if binary:
        raw.format = psycopg.pq.Format.BINARY
    return conn._prepare_cursor(raw)


def int_array(values) -> str:
    """Integers as one PostgreSQL array literal ('{1,2,3}'), for a statement that casts it
    (`%s::bigint[]`, `::integer[]`). A Python list is quoted element by element by psycopg's
    client-side binding: 1-2 ms for a 1,000-GPU team's ids, on every page view."""
    return "{" + ",".join(str(int(v)) for v in values) + "}"


def _store_postgres(values: dict, nulls: dict, n: int) -> int:
    payload = copy_binary(values, nulls, n)
    with transaction.atomic(), connection.cursor() as cursor:
        _ensure_stage(cursor)
        with cursor.copy(f"COPY gpusample_stage ({COLUMN_LIST}) FROM STDIN (FORMAT BINARY)") as cp:
            cp.write(payload)
        if _move_staged(cursor, n, _PG_NEW, _PG_MOVE):
            return n
        return cursor.fetchone()[0]


GROUP_COLUMNS = [*SAMPLE_COLUMNS, ("batch_no", ">i4")]

# Several batches in one statement: the samples go in in batch order, and each new row is
# credited to the first batch that carried it -- the batch that would have stored it had the
# batches been written one by one in that order -- so per-batch `inserted` counts stay exact
# (they sum to the rows really inserted) and a replayed batch is credited 0.
_PG_GROUP_MOVE = _PG_MOVE.replace(
    "FROM gpusample_stage", "FROM gpusample_group_stage ORDER BY batch_no"
).replace(
    "SELECT count(*) FROM ins",
    """, credited AS (
    SELECT DISTINCT ON (s.gpu_id, s.ts) s.batch_no
    FROM ins JOIN gpusample_group_stage s ON s.gpu_id = ins.gpu_id AND s.ts = ins.ts
    WHERE (SELECT count(*) FROM ins) < %(staged)s
    ORDER BY s.gpu_id, s.ts, s.batch_no
)
SELECT batch_no, count(*) FROM credited GROUP BY batch_no
UNION ALL SELECT -1, count(*) FROM ins""")
# The crediting join (ins against the stage, sorted) runs only when some staged sample was not
# inserted -- a resend, or two batches of the group carrying the same sample. When every staged
# sample went in, each batch is credited all of its samples, which is what the join would say.


class NotGrouped(Exception):
    """A stored body GroupColumns cannot take as it is: parse it alone (ingest._parse_stored)."""


_FLOAT_NAMES = (*wire.FLOAT_FIELDS, *wire.OPTIONAL_FLOAT_FIELDS)  # Batch.floats' order
_GROUP_REQUIRED = frozenset(wire.REQUIRED_COLUMNS)
_OPTIONAL = frozenset(wire.OPTIONAL_COLUMNS)
# The columns every batch has, joined as sent; gpu_index is joined as database ids (gpu_id).
_JOINED_AS_SENT = tuple(name for name in wire.REQUIRED_COLUMNS if name != "gpu_index")
_JOINED = (*_JOINED_AS_SENT, "gpu_id")


class GroupColumns:
    """The columns of a group's batches, built once for the whole group.

    Parsing each batch (wire.parse_validated, then batch_columns) and joining the results cost
    some forty numpy calls a batch: at the agent's 80 samples per POST that fixed cost, not the
    values, was most of the worker's Python per batch. Here the batches' JSON lists are joined
    first (list +=, in C) and converted once, into the same values and null masks -- so the
    same COPY stream -- as parsing them one by one (tests/telemetry/test_group_columns.py).

    add() takes a body the API stored (parse_validated's input) whose every GPU index the host
    has, and raises NotGrouped for anything else; the caller then parses that batch alone,
    which names an unknown GPU or reads a legacy body, and hands it to add_batch(). build()
    raises NotGrouped when the joined lists do not convert (a body that is not what the API
    stores): the caller then parses every batch of the group alone."""

    def __init__(self) -> None:
        self.counts: list[int] = []  # samples per batch, by position in the group
        self._lists: dict[str, list] = {name: [] for name in _JOINED}
        self._optional: dict[str, list] = {}  # optional columns some joined batch sent
        self._simulated: list[bool] = []  # per joined batch
        self._joined: list[int] = []  # positions of the joined batches
        self._n_joined = 0  # samples in the joined lists
        self._alone: list[tuple[int, dict, dict]] = []  # (position, values, nulls): add_batch
        self.spans: list[tuple[int, int]] = []  # by position, once built

    def add(self, doc: dict, gpu_ids: dict[int, int]) -> None:
        try:
            samples = doc["samples"]
            n = len(samples["ts"])
            if (n == 0 or not samples.keys() >= _GROUP_REQUIRED
                    or any(len(column) != n for column in samples.values())):
                raise NotGrouped
            gpu_id = list(map(gpu_ids.__getitem__, samples["gpu_index"]))  # KeyError: unknown
            simulated = doc["source"] == "simulated"
        except (KeyError, TypeError, AttributeError) as exc:
            raise NotGrouped from exc
        lists = self._lists
        for name in _JOINED_AS_SENT:
            lists[name] += samples[name]
        lists["gpu_id"] += gpu_id
        for name, column in self._optional.items():
            column += samples.get(name) or [None] * n
        for name in _OPTIONAL.intersection(samples).difference(self._optional):
            self._optional[name] = [None] * self._n_joined + samples[name]
        self._simulated.append(simulated)
        self._joined.append(len(self.counts))
        self.counts.append(n)
        self._n_joined += n

    def add_batch(self, batch: Batch, gpu_ids: dict[int, int]) -> None:
        """A batch parsed alone, at the next position in the group."""
        values, nulls = batch_columns(batch, gpu_ids)
        self._alone.append((len(self.counts), values, nulls))
        self.counts.append(batch.n)

    def build(self) -> tuple[dict, dict]:
        """(values, nulls) for copy_binary with GROUP_COLUMNS: every batch's rows, batch_no its
        position in the group. Sets `spans`: each batch's first and last sample time (µs)."""
        parts = []
        spans: list[tuple[int, int]] = [(0, 0)] * len(self.counts)
        if self._joined:
            try:
                values, nulls = self._joined_columns()
            except (KeyError, TypeError, ValueError, OverflowError, FieldError) as exc:
                raise NotGrouped from exc
            counts = [self.counts[i] for i in self._joined]
            values["batch_no"] = np.repeat(np.array(self._joined, dtype=np.int32), counts)
            starts = np.cumsum([0, *counts[:-1]])
            firsts = np.minimum.reduceat(values["ts"], starts).tolist()
            lasts = np.maximum.reduceat(values["ts"], starts).tolist()
            for position, first, last in zip(self._joined, firsts, lasts, strict=True):
                spans[position] = (first, last)
            parts.append((values, nulls))
        for position, values, nulls in self._alone:
            values["batch_no"] = np.full(self.counts[position], position, dtype=np.int32)
            spans[position] = (int(values["ts"].min()), int(values["ts"].max()))
            parts.append((values, nulls))
        self.spans = spans
        if len(parts) == 1:
            return parts[0]
        return ({name: np.concatenate([v[name] for v, _ in parts]) for name in parts[0][0]},
                {name: np.concatenate([nl[name] for _, nl in parts]) for name in parts[0][1]})

    def _joined_columns(self) -> tuple[dict, dict]:
        lists, optional, total = self._lists, self._optional, self._n_joined
        ts = np.array(lists["ts"], dtype=np.float64)
        values: dict[str, np.ndarray] = {
            "gpu_id": np.array(lists["gpu_id"], dtype=np.int64),
            "ts": np.round(ts * 1_000_000).astype(np.int64),
            "simulated": np.repeat(np.array(self._simulated, dtype=bool),
                                   [self.counts[i] for i in self._joined]),
        }
        nulls: dict[str, np.ndarray] = {}
        values["energy_mj"], nulls["energy_mj"] = _int_column(lists["energy_mj"])
        method = np.array(list(map(wire.ENERGY_METHODS.__getitem__, lists["energy_method"])),
                          dtype=np.int16)
        values["energy_method"], nulls["energy_method"] = method, method == 0
        # As parse_validated reads it: absent in every batch, unknown for every sample; a value
        # no NVML bitmask can be (a body written by hand) refused.
        values["throttle_reasons"], nulls["throttle_reasons"] = wire.throttle_column(
            optional.get(wire.THROTTLE_FIELD), total)
        names = [name for name in _FLOAT_NAMES if name in lists or name in optional]
        matrix = np.array([lists[name] if name in lists else optional[name] for name in names],
                          dtype=np.float64)  # null -> NaN
        missing = np.isnan(matrix)
        for i, name in enumerate(names):
            values[name], nulls[name] = matrix[i], missing[i]
        if len(names) < len(_FLOAT_NAMES):  # a metric no batch sent: one shared all-null column
            absent, unknown = np.full(total, np.nan), np.ones(total, dtype=bool)
            for name in _FLOAT_NAMES:
                values.setdefault(name, absent)
                nulls.setdefault(name, unknown)
        return values, nulls


_INT_OR_NULL = frozenset({int, type(None)})


def _int_column(values: list) -> tuple[np.ndarray, np.ndarray]:
    """An integer JSON column (nulls allowed) as int64 values and a null mask. Anything but
    integers and nulls -- 3.0, which the API takes as 3, or what it refuses -- raises
    NotGrouped: numpy would truncate 3.5 where the batch read alone is refused."""
    if not set(map(type, values)) <= _INT_OR_NULL:
        raise NotGrouped
    if None not in values:
        return np.array(values, dtype=np.int64), np.zeros(len(values), dtype=bool)
    null = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    return np.array([0 if v is None else v for v in values], dtype=np.int64), null


def store_group(values: dict, nulls: dict, counts: list[int]) -> list[int]:
    """PostgreSQL group commit: store several batches' rows (GroupColumns.build: values and null
    masks, batch_no each row's batch) in the caller's transaction and fold them into the
    rollups; return the samples new per batch (`counts`: each batch's samples).

    This is what makes small batches cheap: 80-sample batches cost a COPY, a move and a commit
    each, and those round trips, not the rows, were the bulk of the worker's time. Most groups
    are new samples only, and go straight into the samples table (_store_new); a group that
    meets a sample stored already goes through the stage and INSERT ... ON CONFLICT, which
    credits each new sample to the first batch that carried it."""
    total = int(values["batch_no"].size)
    # A column null in every row (a metric no batch of the group sent, or no GPU of it reports)
    # stays out of the COPY: the column is null without it (no column of the samples table has a
    # default), and PostgreSQL reads fewer fields a row -- 7.3 against 5.9 ms of its CPU for a
    # group of 54 of bench/ingest's 80-sample batches, which send 10 of the 23 columns (a
    # one-off loop, 2026-12-05).
    columns = [(name, dtype) for name, dtype in GROUP_COLUMNS
               if name not in nulls or not nulls[name].all()]
    inserted = [0] * len(counts)
    # Prepared: planning the group statement cost 3 ms a group, and its plan is the same for
    # a group of 80 samples and of 8,000 (EXPLAIN: only hash against merge joins and
    # aggregates over the group's minutes differ).
    with server_bound_cursor(prepare=True) as cursor:
        _ensure_stage(cursor)
        samples_only = [column for column in columns if column[0] != "batch_no"]
        if _store_new(cursor, values, nulls, total, samples_only):
            return list(counts)
        payload = copy_binary(values, nulls, total, columns)
        group_list = ", ".join(name for name, _ in columns)
        copy_sql = f"COPY gpusample_group_stage ({group_list}) FROM STDIN (FORMAT BINARY)"
        with cursor.copy(copy_sql) as cp:
            cp.write(payload)
        cursor.execute(_PG_GROUP_MOVE, {"staged": total})
        for batch_no, count in cursor.fetchall():
            if batch_no >= 0:
                inserted[batch_no] = count
            elif count == total:  # every staged sample went in: the join was skipped
                inserted = list(counts)
    return inserted


def _store_new(cursor, values: dict, nulls: dict, n: int, columns: list) -> bool:
    """The optimistic path of store_group: COPY every sample straight into the samples table and
    fold the minutes the worker aggregated (minute_rollups) into the rollups, inside a
    savepoint. Right only when every sample goes in: a sample stored already (a resend, two
    batches of the group carrying one sample, a concurrent writer that committed it first)
    fails the COPY with a unique violation, and the retention guard of the default partition
    drops rows below the horizon (the COPY then counts fewer); either way the savepoint is
    rolled back and False returned. A staged COPY and INSERT ... SELECT, then the aggregates in
    SQL, cost PostgreSQL 26.9 ms of CPU a group of 54 of bench/ingest's 80-sample batches; this,
    15.6 (55 rolled-back groups each, a one-off loop, 2026-12-05)."""
    names = ", ".join(name for name, _ in columns)

    def attempt() -> None:
        with cursor.copy(f"COPY telemetry_gpusample ({names}) FROM STDIN (FORMAT BINARY)") as cp:
            cp.write(copy_binary(values, nulls, n, columns))
        if cursor.rowcount != n:
            raise _NotAllNew
        minutes, unknown, minute_columns = minute_rollups(values, nulls)
        with cursor.copy(f"COPY {MINUTE_STAGE} FROM STDIN (FORMAT BINARY)") as cp:
            cp.write(copy_binary(minutes, unknown, len(minutes["gpu_id"]), minute_columns))
        cursor.execute(_PG_FOLD_MINUTES)

    return _in_savepoint(attempt)


def minute_rollups(values: dict, nulls: dict) -> tuple[dict, dict, list[tuple[str, str]]]:
    """The samples' aggregates per GPU and minute, as _agg computes them in SQL: a count, a sum
    or a max of what is not null, NULL for a max or min over nothing, 0 for a sum over nothing.
    Returns copy_binary's (values, nulls) and its column list, in the minute stage's order:
    gpu_id, bucket, then _ROLLUP_ALL's columns, each an int8 (counts) or a float8."""
    minute = values["ts"] // 60_000_000
    order = np.lexsort((minute, values["gpu_id"]))  # stable: each minute's rows in row order
    gpu, minute = values["gpu_id"][order], minute[order]
    first = np.flatnonzero(np.r_[True, (gpu[1:] != gpu[:-1]) | (minute[1:] != minute[:-1])])

    def known(name: str) -> np.ndarray:  # sorted: is the value there
        return ~nulls[name][order]

    def count(mask: np.ndarray) -> np.ndarray:
        return np.add.reduceat(mask.astype(np.int64), first)

    def total(name: str, where: np.ndarray | None = None) -> np.ndarray:
        present = known(name) if where is None else known(name) & where
        return np.add.reduceat(np.where(present, values[name][order], 0.0), first)

    def extreme(name: str, pick) -> np.ndarray:  # NaN: nothing known (NULL)
        return pick.reduceat(np.where(known(name), values[name][order], np.nan), first)

    def pair(a: str, b: str) -> tuple:  # the sums of a and b where both are known, and how many
        both = known(a) & known(b)
        return total(a, both), total(b, both), count(both)

    throttle = values["throttle_reasons"][order]
    throttled = known("throttle_reasons")
    pcie_tx, pcie_rx, pcie_n = pair("pcie_tx_kib_s", "pcie_rx_kib_s")
    nvlink_tx, nvlink_rx, nvlink_n = pair("nvlink_tx_kib_s", "nvlink_rx_kib_s")
    rollups = {
        "samples": np.diff(np.r_[first, gpu.size]),
        "util_sum": total("util_pct"), "util_n": count(known("util_pct")),
        "util_max": extreme("util_pct", np.fmax),
        "power_sum_w": total("power_w"), "power_n": count(known("power_w")),
        "power_max_w": extreme("power_w", np.fmax),
        "mem_used_max_mib": extreme("mem_used_mib", np.fmax),
        "temp_max_c": extreme("temp_c", np.fmax),
        "energy_j": total("energy_j"),
        "simulated_samples": count(values["simulated"][order]),
        "pcie_tx_sum_kib_s": pcie_tx, "pcie_rx_sum_kib_s": pcie_rx, "pcie_n": pcie_n,
        "throttle_n": count(throttled),
        "power_capped_samples": count(throttled & (throttle & THROTTLE_POWER_MASK != 0)),
        "thermal_samples": count(throttled & (throttle & THROTTLE_THERMAL_MASK != 0)),
        "power_limit_min_w": extreme("power_limit_w", np.fmin),
        "nvlink_tx_sum_kib_s": nvlink_tx, "nvlink_rx_sum_kib_s": nvlink_rx,
        "nvlink_n": nvlink_n,
    }
    for sum_name, n_name, column in _MEANS:
        rollups[sum_name], rollups[n_name] = total(column), count(known(column))
    out = {"gpu_id": gpu[first],
           # timestamptz in binary COPY: microseconds since 2000-01-01
           "bucket": minute[first] * 60_000_000 - PG_EPOCH_OFFSET_US}
    masks: dict[str, np.ndarray] = {}
    columns = [("gpu_id", ">i8"), ("bucket", ">i8")]
    for name, _, _ in _ROLLUP_ALL:
        column = rollups[name]
        out[name] = column
        if column.dtype.kind == "f":
            masks[name] = np.isnan(column)
            columns.append((name, ">f8"))
        else:
            columns.append((name, ">i8"))
    return out, masks, columns


def _sqlite_timestamps(ts_us: np.ndarray) -> list[str]:
    """Timestamps as Django stores them in SQLite: naive UTC, 'YYYY-MM-DD HH:MM:SS[.ffffff]'
    (no fraction when it is zero), so ORM lookups compare them correctly."""
    text = np.datetime_as_string(ts_us.astype("datetime64[us]"), unit="us")
    return [t.replace("T", " ").removesuffix(".000000") for t in text.tolist()]


# strftime formats that produce the bucket start exactly as Django stores it in SQLite.
_SQLITE_BUCKETS = (("telemetry_gpuminute", "%Y-%m-%d %H:%M:00", 60),
                   ("telemetry_gpuhour", "%Y-%m-%d %H:00:00", 3600),
                   ("telemetry_gpuday", "%Y-%m-%d 00:00:00", 86400))

# The rollup aggregates as SQLite takes them: a boolean there is 0/1, so the simulated count is
# its sum (FILTER needs SQLite 3.30).
_SQLITE_AGGREGATES = ",\n        ".join(
    "sum(simulated)" if c == "simulated_samples" else expr for c, expr, _ in _ROLLUP_ALL)
_SQLITE_ROLLUP = f"""
    INSERT INTO {{table}} (gpu_id, bucket, {_ROLLUP_COLUMNS})
    SELECT gpu_id, strftime('{{fmt}}', ts), {_SQLITE_AGGREGATES}
    FROM telemetry_gpusample
    WHERE gpu_id IN ({{ids}}) AND ts >= %s AND ts < %s
    GROUP BY 1, 2
    ON CONFLICT (gpu_id, bucket) DO UPDATE SET
        {", ".join(f"{c} = excluded.{c}" for c, _, _ in _ROLLUP_ALL)}
"""


def _store_sqlite(values: dict, nulls: dict, n: int) -> int:
    """The embedded default: INSERT OR IGNORE on the natural key, then the touched buckets are
    rebuilt from raw samples (so a replay changes nothing). Small volumes; no COPY needed."""
    columns = []
    for name, _ in SAMPLE_COLUMNS:
        col = _sqlite_timestamps(values["ts"]) if name == "ts" else values[name].tolist()
        mask = nulls.get(name)
        if mask is not None and mask.any():
            col = [None if m else v for v, m in zip(col, mask.tolist(), strict=True)]
        columns.append(col)
    gpu_ids = ",".join(str(int(g)) for g in np.unique(values["gpu_id"]))
    lo, hi = int(values["ts"].min()), int(values["ts"].max())
    placeholders = ", ".join(["%s"] * len(SAMPLE_COLUMNS))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT OR IGNORE INTO telemetry_gpusample ({COLUMN_LIST}) VALUES ({placeholders})",
            list(zip(*columns, strict=True)),
        )
        inserted = cursor.rowcount  # executemany sums the rows actually inserted
        for table, fmt, step in _SQLITE_BUCKETS:
            step_us = step * 1_000_000
            bounds = _sqlite_timestamps(np.array([lo - lo % step_us, hi - hi % step_us + step_us]))
            cursor.execute(_SQLITE_ROLLUP.format(table=table, fmt=fmt, ids=gpu_ids), bounds)
            if table != "telemetry_gpuminute":
                cursor.execute(_SQLITE_COUNTS.format(table=table, fmt=fmt, ids=gpu_ids), bounds)
    return inserted


# SQLite rebuilds the touched buckets: their minute counts are recounted from minute rollups.
_SQLITE_COUNTS = f"""
    UPDATE {{table}} SET
        util_minutes = (SELECT count(*) FROM telemetry_gpuminute m
                        WHERE m.gpu_id = {{table}}.gpu_id AND m.util_n > 0
                        AND strftime('{{fmt}}', m.bucket) = {{table}}.bucket),
        idle_minutes = (SELECT count(*) FROM telemetry_gpuminute m
                        WHERE m.gpu_id = {{table}}.gpu_id AND m.util_n > 0
                        AND m.util_sum < m.util_n * {IDLE_UTIL_PCT}
                        AND strftime('{{fmt}}', m.bucket) = {{table}}.bucket)
    WHERE gpu_id IN ({{ids}}) AND bucket >= %s AND bucket < %s
"""

# Recount the hour and day rollups' minute counts over [start, end) from the minute rollups
# (PostgreSQL): for rollups written by something else than the ingest statement (bench/dashboard
# merges synthetic minutes into hours). Migration 0010 holds a frozen copy for the backfill.
RECOUNT_MINUTES = (f"""
    UPDATE telemetry_gpuhour h SET util_minutes = c.n, idle_minutes = c.idle
    FROM (SELECT gpu_id, date_trunc('hour', bucket) AS hour, count(*) AS n,
                 count(*) FILTER (WHERE util_sum < util_n * {IDLE_UTIL_PCT}) AS idle
          FROM telemetry_gpuminute WHERE util_n > 0 AND bucket >= %(start)s AND bucket < %(end)s
          GROUP BY 1, 2) c
    WHERE h.gpu_id = c.gpu_id AND h.bucket = c.hour
      AND (h.util_minutes, h.idle_minutes) IS DISTINCT FROM (c.n, c.idle)
""", """
    UPDATE telemetry_gpuday d SET util_minutes = c.n, idle_minutes = c.idle
    FROM (SELECT gpu_id, date_trunc('day', bucket) AS day, sum(util_minutes) AS n,
                 sum(idle_minutes) AS idle
          FROM telemetry_gpuhour WHERE bucket >= date_trunc('day', %(start)s::timestamptz)
              AND bucket < date_trunc('day', %(end)s::timestamptz) + interval '1 day'
          GROUP BY 1, 2) c
    WHERE d.gpu_id = c.gpu_id AND d.bucket = c.day
      AND (d.util_minutes, d.idle_minutes) IS DISTINCT FROM (c.n, c.idle)
""")
