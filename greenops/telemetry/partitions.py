"""Storage over time: raw samples and minute rollups in time partitions, and their retention.

PostgreSQL: `telemetry_gpusample` is RANGE-partitioned on ts by UTC day, `telemetry_gpuminute`
on bucket by ISO week (Monday 00:00 UTC). Days for raw samples because a large fleet writes
~86,400 rows per GPU per day (10,000 GPUs: 864 M rows a day), so a day is already a big table
and retention in days drops exactly one day at a time; weeks for minute rollups because they are
60x smaller and kept in weeks, so a week partition is about the size of a raw day. Hour and day
rollups are small and kept forever: not partitioned.

- Partitions are created ahead by beat (create_ahead): the current period and the next
  settings.PARTITIONS_AHEAD_DAYS days. Each table also has a DEFAULT partition, so a sample for a
  period without a partition (late, or ahead of the partitions) is stored, not refused; the next
  create_ahead gives that period its own partition and moves those rows into it.
- Retention (apply_retention) drops whole expired partitions, never a DELETE over the big table.
  A drop is refused (logged, and kept in RetentionMark.status) while the data in it is not fully
  rolled up: an accepted batch not yet stored still holds samples of that period, a KPI hour over
  it still waits to be rebuilt (telemetry.LateHour), or the per-GPU sample counts of the period
  differ from the day rollups. Hour and day rollups are folded in the same statement that stores
  the raw rows (store.py), so a committed raw row is already rolled up.
- Before a partition is dropped, RetentionMark.dropped_before moves to its upper bound, and a
  trigger on the DEFAULT partition refuses rows older than that. A replayed batch after the drop
  therefore stores nothing and folds nothing into the rollups a second time (otherwise the rows,
  no longer there to conflict with, would be inserted into the default partition and counted
  again). The same mark guards SQLite's raw table.
- SQLite (the embedded default): no partitions; retention is a DELETE by age with the same
  settings and the same checks.

Citus: every unique key of these tables is (gpu_id, ts|bucket), so they can be distributed on
gpu_id (see README, "Scaling out").
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from dataclasses import dataclass

from django.conf import settings
from django.core import checks
from django.db import connection, transaction
from django.utils import timezone

from greenops.request_body import decode_body, parse_json
from greenops.telemetry import wire
from greenops.telemetry.models import GpuMinute, GpuSample, IngestBatch, LateHour, RetentionMark
from greenops.windows import floor_day

log = logging.getLogger(__name__)

DAY = dt.timedelta(days=1)
WEEK = dt.timedelta(days=7)
# DDL waits at most this long for a lock and gives up (the next beat run retries), so a long
# report query cannot make every ingest statement queue behind a waiting ALTER/DROP.
LOCK_TIMEOUT = "5s"
# Accepted batches not yet stored are decoded to see which periods they hold; past this many, a
# drop waits for the backlog to drain instead of reading it all.
MAX_PENDING_TO_READ = 2000


@dataclass(frozen=True)
class Spec:
    table: str
    column: str  # the partition key
    step: str  # PostgreSQL date_trunc unit: 'day' or 'week'
    keep_setting: str  # the settings name of the retention
    keep_unit: dt.timedelta  # what one unit of that setting is

    @property
    def default(self) -> str:
        return f"{self.table}_default"

    def keep(self) -> dt.timedelta | None:
        """How long rows are kept; None = forever (setting 0)."""
        n = int(getattr(settings, self.keep_setting))
        return n * self.keep_unit if n > 0 else None

    def floor(self, t: dt.datetime) -> dt.datetime:
        t = floor_day(t)
        return t - dt.timedelta(days=t.weekday()) if self.step == "week" else t

    def next(self, start: dt.datetime) -> dt.datetime:
        return start + (WEEK if self.step == "week" else DAY)

    def name(self, start: dt.datetime) -> str:
        return f"{self.table}_p{start:%Y%m%d}"


RAW = Spec("telemetry_gpusample", "ts", "day", "RETAIN_RAW_SAMPLES_DAYS", DAY)
MINUTE = Spec("telemetry_gpuminute", "bucket", "week", "RETAIN_MINUTE_ROLLUPS_WEEKS", WEEK)
SPECS = (RAW, MINUTE)


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


# --- Reading the catalog --------------------------------------------------------------------

def is_partitioned(table: str) -> bool:
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as c:
        c.execute("SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(%s)",
                  [table])
        return c.fetchone() is not None


_BOUND = re.compile(r"FROM \('([^']+)'\) TO \('([^']+)'\)")


def partitions(spec: Spec) -> list[tuple[str, dt.datetime, dt.datetime]]:
    """(name, lower, upper) of each range partition, oldest first (the default left out)."""
    with connection.cursor() as c:
        c.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(%s)",
            [spec.table],
        )
        rows = c.fetchall()
    out = []
    for name, bound in rows:
        m = _BOUND.search(bound or "")
        if m:
            lo, hi = (dt.datetime.fromisoformat(v).astimezone(dt.UTC) for v in m.groups())
            out.append((name, lo, hi))
    return sorted(out, key=lambda p: p[1])


def _columns(table: str, cursor) -> list[str]:
    cursor.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum", [table])
    return [r[0] for r in cursor.fetchall()]


# --- The horizon below which rows are refused -----------------------------------------------

def horizon(spec: Spec) -> dt.datetime | None:
    mark = RetentionMark.objects.filter(table_name=spec.table).first()
    return mark.dropped_before if mark else None


def _set_horizon(spec: Spec, before: dt.datetime) -> None:
    mark, _ = RetentionMark.objects.get_or_create(table_name=spec.table)
    if mark.dropped_before is None or mark.dropped_before < before:
        mark.dropped_before = before
        mark.save(update_fields=["dropped_before"])


def _note(spec: Spec, status: str, now: dt.datetime) -> None:
    RetentionMark.objects.update_or_create(table_name=spec.table,
                                           defaults={"status": status, "checked_at": now})


GUARD_FUNCTION = """
CREATE OR REPLACE FUNCTION greenops_refuse_below_horizon() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    h timestamptz;
BEGIN
    -- Only rows that found no partition reach the default partition, so this runs rarely.
    SELECT dropped_before INTO h FROM telemetry_retentionmark WHERE table_name = TG_ARGV[0];
    IF h IS NOT NULL AND (to_jsonb(NEW) ->> TG_ARGV[1])::timestamptz < h THEN
        RETURN NULL;  -- retention dropped this period: storing it again would count it twice
    END IF;
    RETURN NEW;
END $$
"""


def install_guard(spec: Spec, cursor) -> None:
    """Refuse, row by row and silently, rows older than the table's retention horizon."""
    if connection.vendor == "postgresql":
        cursor.execute(GUARD_FUNCTION)
        cursor.execute(f"DROP TRIGGER IF EXISTS below_horizon ON {_q(spec.default)}")
        cursor.execute(
            f"CREATE TRIGGER below_horizon BEFORE INSERT ON {_q(spec.default)} FOR EACH ROW "
            f"EXECUTE FUNCTION greenops_refuse_below_horizon('{spec.table}', '{spec.column}')")
    else:  # SQLite: on the table itself (datetimes are text in one sortable format there)
        cursor.execute(f"DROP TRIGGER IF EXISTS {spec.table}_below_horizon")
        cursor.execute(
            f"CREATE TRIGGER {spec.table}_below_horizon BEFORE INSERT ON {spec.table} "
            f"FOR EACH ROW WHEN NEW.{spec.column} < (SELECT dropped_before FROM "
            f"telemetry_retentionmark WHERE table_name = '{spec.table}') "
            f"BEGIN SELECT RAISE(IGNORE); END")


# --- Converting a plain table (the migration) -----------------------------------------------

def _periods_with_rows(spec: Spec, table: str, cursor) -> list[dt.datetime]:
    cursor.execute(f"SELECT DISTINCT date_trunc('{spec.step}', {spec.column}) FROM {_q(table)}")
    return sorted(r[0].astimezone(dt.UTC) for r in cursor.fetchall())


def _ahead(spec: Spec, now: dt.datetime) -> list[dt.datetime]:
    """The periods that should exist now: the current one up to now + PARTITIONS_AHEAD_DAYS."""
    start, last = spec.floor(now), now + dt.timedelta(days=settings.PARTITIONS_AHEAD_DAYS)
    out = []
    while start <= last:
        out.append(start)
        start = spec.next(start)
    return out


def convert(spec: Spec, cursor, now: dt.datetime | None = None) -> int:
    """Turn a plain table into a partitioned one holding the same rows; returns the rows moved.

    The new parent is made `LIKE` the old table, so it carries whatever columns the table has
    when this runs (another migration may have added some). Writers wait on the lock (readers
    do not) until the migration's transaction commits the swap."""
    now = now or timezone.now()
    old, new = spec.table, f"{spec.table}_partitioned"
    cursor.execute(f"LOCK TABLE {_q(old)} IN SHARE MODE")
    cursor.execute(f"CREATE TABLE {_q(new)} (LIKE {_q(old)} INCLUDING DEFAULTS) "
                   f"PARTITION BY RANGE ({spec.column})")
    cursor.execute(f"CREATE TABLE {_q(spec.default)} PARTITION OF {_q(new)} DEFAULT")
    for start in sorted(set(_periods_with_rows(spec, old, cursor)) | set(_ahead(spec, now))):
        cursor.execute(
            f"CREATE TABLE {_q(spec.name(start))} PARTITION OF {_q(new)} "
            f"FOR VALUES FROM (%s) TO (%s)", [start, spec.next(start)])
    cols = ", ".join(_q(c) for c in _columns(old, cursor))
    cursor.execute(f"INSERT INTO {_q(new)} ({cols}) SELECT {cols} FROM {_q(old)}")
    moved = cursor.rowcount
    cursor.execute(f"DROP TABLE {_q(old)}")
    cursor.execute(f"ALTER TABLE {_q(new)} RENAME TO {_q(old)}")
    # The key after the load: one sorted index build per partition instead of row by row.
    cursor.execute(f"ALTER TABLE {_q(old)} ADD CONSTRAINT {_q(old + '_pkey')} "
                   f"PRIMARY KEY (gpu_id, {spec.column})")
    install_guard(spec, cursor)
    return moved


def unconvert(spec: Spec, cursor) -> int:
    """The reverse migration: one plain table with the same rows again."""
    old, new = spec.table, f"{spec.table}_plain"
    cursor.execute(f"LOCK TABLE {_q(old)} IN SHARE MODE")
    cursor.execute(f"CREATE TABLE {_q(new)} (LIKE {_q(old)} INCLUDING DEFAULTS)")
    cols = ", ".join(_q(c) for c in _columns(old, cursor))
    cursor.execute(f"INSERT INTO {_q(new)} ({cols}) SELECT {cols} FROM {_q(old)}")
    moved = cursor.rowcount
    cursor.execute(f"DROP TABLE {_q(old)}")  # its partitions go with it
    cursor.execute(f"ALTER TABLE {_q(new)} RENAME TO {_q(old)}")
    cursor.execute(f"ALTER TABLE {_q(old)} ADD CONSTRAINT {_q(old + '_pkey')} "
                   f"PRIMARY KEY (gpu_id, {spec.column})")
    return moved


# --- Creating partitions ahead ----------------------------------------------------------------

def _attach(spec: Spec, start: dt.datetime, cursor) -> int:
    """Create and attach the partition of the period starting at `start`, moving into it any
    rows the default partition holds for that period; returns the rows moved."""
    name, end = spec.name(start), spec.next(start)
    cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
    # Parent first, as inserts take them. ATTACH itself needs only SHARE UPDATE EXCLUSIVE on
    # the parent, but an INSERT that already routed a row of this period to the default
    # partition would then fail on the default's new constraint once we commit (found by
    # tests/telemetry/test_storage_concurrency.py). SHARE ROW EXCLUSIVE lets in-flight inserts
    # finish and holds new ones for the few milliseconds this takes; readers are not blocked.
    cursor.execute(f"LOCK TABLE {_q(spec.table)} IN SHARE ROW EXCLUSIVE MODE")
    cursor.execute(f"LOCK TABLE {_q(spec.default)} IN ACCESS EXCLUSIVE MODE")
    cursor.execute(f"CREATE TABLE {_q(name)} (LIKE {_q(spec.table)} INCLUDING DEFAULTS)")
    cols = ", ".join(_q(c) for c in _columns(spec.table, cursor))
    cursor.execute(
        f"WITH moved AS (DELETE FROM {_q(spec.default)} WHERE {spec.column} >= %s AND "
        f"{spec.column} < %s RETURNING {cols}) INSERT INTO {_q(name)} ({cols}) "
        f"SELECT {cols} FROM moved", [start, end])
    moved = cursor.rowcount
    cursor.execute(f"ALTER TABLE {_q(spec.table)} ATTACH PARTITION {_q(name)} "
                   f"FOR VALUES FROM (%s) TO (%s)", [start, end])
    return moved


def create_ahead(now: dt.datetime | None = None) -> dict[str, list[str]]:
    """Beat: make sure the current and next periods have partitions, and give the periods that
    only the default partition holds (late or early rows) their own. Returns what was created.
    Does nothing where the tables are not partitioned (SQLite)."""
    now = now or timezone.now()
    created: dict[str, list[str]] = {}
    for spec in SPECS:
        if not is_partitioned(spec.table):
            continue
        with connection.cursor() as c:
            in_default = _periods_with_rows(spec, spec.default, c)
        names = _create(spec, set(_ahead(spec, now)) | set(in_default))
        if names:
            created[spec.table] = names
    return created


def create_range(start: dt.datetime, end: dt.datetime) -> dict[str, list[str]]:
    """Partitions for every period overlapping [start, end), for a bulk load of history (a
    benchmark, an import) that would otherwise pile into the default partition."""
    created: dict[str, list[str]] = {}
    for spec in SPECS:
        if not is_partitioned(spec.table):
            continue
        starts, t = set(), spec.floor(start)
        while t < end:
            starts.add(t)
            t = spec.next(t)
        names = _create(spec, starts)
        if names:
            created[spec.table] = names
    return created


def _create(spec: Spec, starts: set[dt.datetime]) -> list[str]:
    have = {lo for _, lo, _ in partitions(spec)}
    floor = horizon(spec)
    created = []
    for start in sorted(starts - have):
        if floor is not None and start < floor:
            continue  # retention has passed it; the guard refuses such rows
        try:
            with transaction.atomic(), connection.cursor() as c:
                moved = _attach(spec, start, c)
        except Exception:  # a lock not granted in time, most likely: the next run retries
            log.warning("could not create partition %s", spec.name(start), exc_info=True)
            continue
        created.append(spec.name(start))
        if moved:
            log.info("%s: moved %d rows from the default partition", spec.name(start), moved)
    return created


# --- Retention --------------------------------------------------------------------------------

def _pending_oldest_us() -> tuple[int | None, int]:
    """The oldest sample timestamp (µs) held by accepted batches not yet stored, and how many
    such batches there are; (None, n) when there are too many to read."""
    pending = IngestBatch.objects.filter(status=IngestBatch.Status.PENDING)
    n = pending.count()
    if n == 0 or n > MAX_PENDING_TO_READ:
        return None, n
    oldest = None
    for payload, gz in pending.values_list("payload", "gzip_encoded").iterator(chunk_size=100):
        try:
            doc = parse_json(decode_body(bytes(payload), gz, 1 << 40))
            batch = wire.parse_batch(doc, now_s=time.time(), max_samples=1 << 40,
                                     max_future_s=float("inf"), max_age_s=float("inf"))
        except Exception:  # the worker will mark it failed; it holds nothing to store
            continue
        first = int(batch.ts_us.min())
        oldest = first if oldest is None else min(oldest, first)
    return oldest, n


def _unrolled(spec: Spec, lo: dt.datetime | None, hi: dt.datetime) -> int:
    """GPUs whose sample count over [lo, hi) in this table differs from their day rollups'
    (0 = every row of the range is in the rollups kept forever). One scan of the partition (a
    raw day is a UTC day bucket, a minute week seven of them) and of the day rollups' range."""
    count = "count(*)" if spec is RAW else "sum(samples)"
    adapt = connection.ops.adapt_datetimefield_value  # SQLite compares its own text format
    lo_sql = "{col} >= %s AND " if lo else ""
    params = [adapt(lo), adapt(hi)] if lo else [adapt(hi)]
    with connection.cursor() as c:
        c.execute(f"SELECT gpu_id, {count} FROM {_q(spec.table)} "
                  f"WHERE {lo_sql.format(col=spec.column)}{spec.column} < %s GROUP BY gpu_id",
                  params)
        here = dict(c.fetchall())
        c.execute(f"SELECT gpu_id, sum(samples) FROM telemetry_gpuday "
                  f"WHERE {lo_sql.format(col='bucket')}bucket < %s GROUP BY gpu_id", params)
        days = dict(c.fetchall())
    return sum(1 for g, n in here.items() if int(days.get(g) or 0) != int(n))


def refusal(spec: Spec, lo: dt.datetime | None, hi: dt.datetime,
            pending: tuple[int | None, int]) -> str:
    """Why the rows of [lo, hi) must not be dropped yet, or '' when they may."""
    oldest_us, n_pending = pending
    if n_pending > MAX_PENDING_TO_READ:
        return f"{n_pending} accepted batches are not stored yet; waiting for the backlog"
    hi_us = int(hi.timestamp() * 1_000_000)
    if oldest_us is not None and oldest_us < hi_us:
        return "an accepted batch not stored yet holds samples of this period"
    if spec is MINUTE and LateHour.objects.filter(hour__lt=hi).exists():
        return "KPI hours of this period still wait to be rebuilt from minute rollups"
    bad = _unrolled(spec, lo, hi)
    if bad:
        return f"{bad} GPUs' sample counts differ from their day rollups (not rolled up)"
    return ""


def apply_retention(now: dt.datetime | None = None) -> dict[str, dict]:
    """Beat: drop what is older than each table's retention, a whole partition at a time
    (PostgreSQL) or with a DELETE by age (SQLite), oldest first, stopping at the first period
    that is not fully rolled up. Returns {table: {"dropped": [...], "refused": reason}}."""
    now = now or timezone.now()
    pending = _pending_oldest_us()
    report: dict[str, dict] = {}
    for spec in SPECS:
        keep = spec.keep()
        if keep is None:
            continue
        expired_before = now - keep
        if is_partitioned(spec.table):
            report[spec.table] = _drop_partitions(spec, expired_before, pending)
        else:
            report[spec.table] = _delete_by_age(spec, spec.floor(expired_before), pending)
        entry = report[spec.table]
        status = (f"refused: {entry['refused']}" if entry.get("refused")
                  else f"ok, dropped {len(entry['dropped'])}")
        _note(spec, status, now)
    return report


def _drop_partitions(spec: Spec, expired_before: dt.datetime, pending) -> dict:
    dropped: list[str] = []
    for name, lo, hi in partitions(spec):
        if hi > expired_before:
            break
        reason = refusal(spec, lo, hi, pending)
        if reason:
            log.warning("retention: not dropping %s: %s", name, reason)
            return {"dropped": dropped, "refused": f"{name}: {reason}"}
        # Mark first, in its own transaction: from then on the default partition refuses rows of
        # this period, so nothing can be stored again once the partition is gone.
        with transaction.atomic():
            _set_horizon(spec, hi)
        try:
            with transaction.atomic(), connection.cursor() as c:
                c.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                # DROP first: it takes the parent's ACCESS EXCLUSIVE lock before anything else.
                c.execute(f"DROP TABLE {_q(name)}")
                # Rows of the period that arrived in the default partition before the mark (it is
                # small; this is not a DELETE over the big table).
                c.execute(f"DELETE FROM {_q(spec.default)} WHERE {spec.column} < %s", [hi])
        except Exception as exc:  # most likely the lock: the next run drops it
            log.warning("retention: could not drop %s yet", name, exc_info=True)
            return {"dropped": dropped, "refused": f"{name}: {exc}"}
        log.info("retention: dropped %s (rows before %s)", name, hi.isoformat())
        dropped.append(name)
    return {"dropped": dropped, "refused": ""}


def _delete_by_age(spec: Spec, cutoff: dt.datetime, pending) -> dict:
    """SQLite: the embedded default holds a small fleet; a DELETE by age is fine there."""
    model = GpuSample if spec is RAW else GpuMinute
    field = spec.column
    if not model.objects.filter(**{f"{field}__lt": cutoff}).exists():
        return {"dropped": [], "refused": ""}
    reason = refusal(spec, None, cutoff, pending)
    if reason:
        log.warning("retention: not deleting %s before %s: %s", spec.table, cutoff, reason)
        return {"dropped": [], "refused": f"before {cutoff.isoformat()}: {reason}"}
    with transaction.atomic():
        _set_horizon(spec, cutoff)
        deleted, _ = model.objects.filter(**{f"{field}__lt": cutoff}).delete()
    log.info("retention: deleted %d rows of %s before %s", deleted, spec.table, cutoff)
    return {"dropped": [f"{deleted} rows before {cutoff.isoformat()}"], "refused": ""}


def check_settings(app_configs=None, **kwargs) -> list:
    """System check: raw samples kept for less time than the API accepts them means late
    samples (an agent replaying its spool) between the two ages are refused on arrival."""
    days = settings.RETAIN_RAW_SAMPLES_DAYS
    if days > 0 and days * 86400 < settings.INGEST_MAX_AGE_S:
        return [checks.Warning(
            f"GREENOPS_RETAIN_RAW_DAYS={days} is shorter than INGEST_MAX_AGE_S "
            f"({settings.INGEST_MAX_AGE_S / 86400:g} days)",
            hint="samples older than the dropped days are accepted by the API but not stored; "
                 "raise GREENOPS_RETAIN_RAW_DAYS or lower INGEST_MAX_AGE_S",
            id="greenops.W101")]
    return []
