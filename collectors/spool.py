"""The on-disk spool: every batch stays here until the server acknowledged it.

SQLite in WAL mode (stdlib sqlite3): one file, atomic writes, readable by ``greenops-agent
status`` while the agent runs. A batch's id and payload are fixed when it is spooled, so a
resend after a crash or restart is byte-for-byte the same batch and the server dedupes it.

Bounded: over ``max_bytes`` of payload or ``max_batches`` rows, the OLDEST batches are
dropped (and counted, and logged) — on a host whose server is gone for weeks, recent data is
worth more than old data and the disk must not fill up.

Batches the server refused for good (400, 413, 422, ...) move to ``rejected`` with the
server's answer, so they are not retried forever but stay for the operator to look at.

The journal: each tick's samples are written here as they are taken (one small transaction per
tick), so a crash or SIGKILL loses at most the tick being read, not the batch being gathered.
A batch is cut from the journal in the same transaction that spools it (``put(...,
seal_journal=True)``), so every sample is in exactly one of the two; on the next start the
agent spools what an unclean stop left in the journal as a batch of its own. The same
transaction keeps the agent's ``state`` (each GPU's last energy counter reading), so the first
interval after a restart can cover the gap.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 1024**3  # 1 GiB of compressed batches: weeks of a busy 8-GPU host
DEFAULT_MAX_BATCHES = 1_000_000
MAX_REJECTED = 10_000  # the dead-letter table is bounded too
# Batches of every kind (GPU samples, host CPU/RAM energy, inference windows) share one spool
# and one delivery order; each remembers its endpoint. Spools written before there were other
# kinds get the column with the samples endpoint as default.
SAMPLES_PATH = "/api/v1/samples"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,   -- spool order = send order
    batch_id TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    samples INTEGER NOT NULL,
    payload BLOB NOT NULL,                   -- gzip-compressed v1 JSON
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL DEFAULT 0,
    last_error TEXT,
    path TEXT NOT NULL DEFAULT '/api/v1/samples'  -- the endpoint this batch is posted to
);
CREATE TABLE IF NOT EXISTS rejected (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    rejected_at REAL NOT NULL,
    samples INTEGER NOT NULL,
    payload BLOB NOT NULL,
    http_status INTEGER,
    error_body TEXT,
    path TEXT NOT NULL DEFAULT '/api/v1/samples'
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value REAL NOT NULL);
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY,                 -- rowid: no AUTOINCREMENT bookkeeping per tick
    samples INTEGER NOT NULL,
    columns BLOB NOT NULL,                   -- one tick's samples: marshal {field: [values]}
    state BLOB                               -- the agent's state after that tick (marshal)
);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value BLOB NOT NULL);
"""


def default_spool_path() -> Path:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/greenops-agent/spool.db")
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(state) / "greenops-agent" / "spool.db"


@dataclass(frozen=True)
class SpooledBatch:
    batch_id: str
    created_at: float
    samples: int
    payload: bytes
    attempts: int
    next_attempt_at: float
    path: str = SAMPLES_PATH


@dataclass(frozen=True)
class SpoolStatus:
    depth: int
    samples: int
    bytes: int
    oldest_age_s: float | None
    last_ack_at: float | None
    rejected: int
    dropped_batches: int
    retrying_since: float | None = None  # the first failed send since the last ack


class Spool:
    """Thread-safe: the sampling thread puts, the shipper thread peeks and acks."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_batches: int = DEFAULT_MAX_BATCHES,
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.max_batches = max_batches
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            self.path, timeout=30, isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode survives a process crash; a power cut may lose the last batch.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        for table in ("batches", "rejected"):
            columns = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            if "path" not in columns:  # a spool from before batches had endpoints
                self._db.execute(
                    f"ALTER TABLE {table} ADD COLUMN path TEXT NOT NULL DEFAULT '{SAMPLES_PATH}'"
                )
        self._bytes, self._depth = self._db.execute(
            "SELECT COALESCE(SUM(LENGTH(payload)), 0), COUNT(*) FROM batches"
        ).fetchone()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing -------------------------------------------------------------------------

    def put(
        self,
        batch_id: str,
        payload: bytes,
        samples: int,
        created_at: float | None = None,
        path: str = SAMPLES_PATH,
        seal_journal: bool = False,
    ) -> None:
        """Spool a batch. ``seal_journal``: the batch holds every journaled sample, which
        leave the journal in the same transaction (never in both, never in neither)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT INTO batches (batch_id, created_at, samples, payload, path) "
                    "VALUES (?,?,?,?,?)",
                    (
                        batch_id,
                        created_at if created_at is not None else time.time(),
                        samples,
                        payload,
                        path,
                    ),
                )
                if seal_journal:  # the newest journaled state outlives the journal
                    self._db.execute(
                        "INSERT OR REPLACE INTO state (key, value) SELECT 'agent', state "
                        "FROM journal WHERE state IS NOT NULL ORDER BY seq DESC LIMIT 1"
                    )
                    self._db.execute("DELETE FROM journal")
                self._bytes += len(payload)
                self._depth += 1
                self._enforce_bound()
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                self._bytes, self._depth = self._db.execute(
                    "SELECT COALESCE(SUM(LENGTH(payload)), 0), COUNT(*) FROM batches"
                ).fetchone()
                raise

    def _enforce_bound(self) -> None:
        dropped = dropped_samples = 0
        # Keep at least the batch just written: a single oversize batch is still shipped.
        while (self._bytes > self.max_bytes or self._depth > self.max_batches) and self._depth > 1:
            seq, size, samples = self._db.execute(
                "SELECT seq, LENGTH(payload), samples FROM batches ORDER BY seq LIMIT 1"
            ).fetchone()
            self._db.execute("DELETE FROM batches WHERE seq = ?", (seq,))
            self._bytes -= size
            self._depth -= 1
            dropped += 1
            dropped_samples += samples
        if dropped:
            self._bump("dropped_batches", dropped)
            self._bump("dropped_samples", dropped_samples)
            log.warning(
                "spool full (%d batches, %d bytes): dropped the %d oldest batches (%d samples)",
                self._depth,
                self._bytes,
                dropped,
                dropped_samples,
            )

    def _bump(self, key: str, by: float) -> None:
        self._db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = value + excluded.value",
            (key, by),
        )

    def _set(self, key: str, value: float) -> None:
        self._db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    # --- the journal of samples not yet in a batch -----------------------------------------

    def journal(self, columns: bytes, samples: int, state: bytes | None = None) -> None:
        """Keep one tick's samples and the agent's state after it: one row, one autocommitted
        INSERT (the cheapest durable write SQLite has; the agent does one a tick)."""
        with self._lock:
            self._db.execute("INSERT INTO journal (samples, columns, state) VALUES (?, ?, ?)",
                             (samples, columns, state))

    def journaled(self) -> list[bytes]:
        """The journaled ticks' samples, oldest first."""
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT columns FROM journal ORDER BY seq")]

    def journaled_samples(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COALESCE(SUM(samples), 0) FROM journal").fetchone()[0]

    def agent_state(self) -> bytes | None:
        """The state the agent journaled last, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT state FROM journal WHERE state IS NOT NULL ORDER BY seq DESC LIMIT 1"
            ).fetchone() or self._db.execute(
                "SELECT value FROM state WHERE key = 'agent'").fetchone()
        return row[0] if row else None

    # --- shipping ------------------------------------------------------------------------

    def head(self) -> SpooledBatch | None:
        """The oldest batch: batches are shipped strictly in spool order."""
        with self._lock:
            row = self._db.execute(
                "SELECT batch_id, created_at, samples, payload, attempts, next_attempt_at, path "
                "FROM batches ORDER BY seq LIMIT 1"
            ).fetchone()
        return SpooledBatch(*row) if row else None

    def peek(self, limit: int) -> list[SpooledBatch]:
        """The oldest ``limit`` batches, in spool order (the shipper merges a backlog)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT batch_id, created_at, samples, payload, attempts, next_attempt_at, path "
                "FROM batches ORDER BY seq LIMIT ?", (limit,)
            ).fetchall()
        return [SpooledBatch(*row) for row in rows]

    def ack(self, batch_id: str, now: float | None = None) -> bool:
        """The server has the batch: forget it. False if it was already gone."""
        with self._lock:
            # No DELETE ... RETURNING: it needs SQLite 3.35, newer than some GPU hosts have.
            row = self._db.execute(
                "SELECT LENGTH(payload) FROM batches WHERE batch_id = ?", (batch_id,)
            ).fetchone()
            if row is None:
                return False
            self._db.execute("DELETE FROM batches WHERE batch_id = ?", (batch_id,))
            self._bytes -= row[0]
            self._depth -= 1
            self._set("last_ack_at", now if now is not None else time.time())
            self._db.execute("DELETE FROM meta WHERE key = 'retrying_since'")  # sending again
            return True

    def defer(self, batch_id: str, next_attempt_at: float, error: str,
              now: float | None = None) -> None:
        """A failed attempt that will be retried: remember when, and why it failed, and when
        the failures began (cleared by the next ack), for `status`."""
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('retrying_since', ?)",
                             (now if now is not None else time.time(),))
            self._db.execute(
                "UPDATE batches SET attempts = attempts + 1, next_attempt_at = ?, last_error = ? "
                "WHERE batch_id = ?",
                (next_attempt_at, error[:2000], batch_id),
            )

    def reject(self, batch_id: str, http_status: int | None, error_body: str) -> None:
        """Dead-letter a batch the server will never accept."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute(
                    "SELECT created_at, samples, payload, path FROM batches WHERE batch_id = ?",
                    (batch_id,),
                ).fetchone()
                if row is not None:
                    self._db.execute("DELETE FROM batches WHERE batch_id = ?", (batch_id,))
                    self._db.execute(
                        "INSERT INTO rejected (batch_id, created_at, rejected_at, samples, "
                        "payload, http_status, error_body, path) VALUES (?,?,?,?,?,?,?,?)",
                        (
                            batch_id,
                            row[0],
                            time.time(),
                            row[1],
                            row[2],
                            http_status,
                            error_body[:10000],
                            row[3],
                        ),
                    )
                    self._bytes -= len(row[2])
                    self._depth -= 1
                    self._db.execute(
                        "DELETE FROM rejected WHERE seq <= (SELECT MAX(seq) FROM rejected) - ?",
                        (MAX_REJECTED,),
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    # --- status --------------------------------------------------------------------------

    def depth(self) -> int:
        return self._depth

    def oldest_age(self, now: float | None = None) -> float | None:
        with self._lock:
            row = self._db.execute("SELECT MIN(created_at) FROM batches").fetchone()
        if row[0] is None:
            return None
        return max(0.0, (now if now is not None else time.time()) - row[0])

    def last_ack_at(self) -> float | None:
        return self._meta("last_ack_at")

    def _meta(self, key: str) -> float | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def rejected(self) -> list[dict]:
        with self._lock:
            rows = self._db.execute(
                "SELECT batch_id, created_at, rejected_at, samples, http_status, error_body, path "
                "FROM rejected ORDER BY seq"
            ).fetchall()
        keys = (
            "batch_id", "created_at", "rejected_at", "samples", "http_status", "error_body", "path"
        )
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def batch_ids(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT batch_id FROM batches ORDER BY seq")]

    def payloads(self) -> list[bytes]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT payload FROM batches ORDER BY seq")]

    def status(self, now: float | None = None) -> SpoolStatus:
        with self._lock:
            depth, samples, size = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(samples), 0), COALESCE(SUM(LENGTH(payload)), 0) "
                "FROM batches"
            ).fetchone()
            (rejected,) = self._db.execute("SELECT COUNT(*) FROM rejected").fetchone()
        return SpoolStatus(
            depth=depth,
            samples=samples,
            bytes=size,
            oldest_age_s=self.oldest_age(now),
            last_ack_at=self.last_ack_at(),
            rejected=rejected,
            dropped_batches=int(self._meta("dropped_batches") or 0),
            retrying_since=self._meta("retrying_since"),
        )
