"""Reads from a PostgreSQL streaming replica, writes and read-after-write on the primary.

Only when DATABASE_REPLICA_URL is set (settings then add the "replica" alias, this router and
the ReplicaReads middleware); without it nothing here runs and every query uses "default".

Where a read goes is decided by a scope (a context variable, so each request thread and each
task has its own), and the default with no scope is the primary: management commands, beat,
Celery tasks and anything not named here read the primary. Three places open a scope:

- ReplicaReads (middleware): a GET/HEAD/OPTIONS page or API read goes to the replica, unless
  the replica is down, its lag cannot be told, or the user is pinned: after a request that
  wrote (any POST/PUT/PATCH/DELETE, or a GET that wrote), the response carries the primary's
  WAL position (a cookie, and for API tokens a cache key) and that user reads the primary
  until the replica has replayed past it -- read-your-writes, as GitLab's load balancer does
  by WAL location (Rails and GitHub pin for a fixed few seconds). A write inside a replica
  scope sends the rest of that request's reads to the primary too.
- replica_reads(fn): report generation's month of figures, when the replica is within
  REPLICA_LAG_LABEL_S (a report prints no "as of"); a replica that fails midway reruns fn on
  the primary.
- Celery's task_prerun (greenops/celery.py): every task reads the primary, even one run
  eagerly inside a page request.

Reads inside a transaction on the primary stay on the primary. The replica's lag is measured
at most every REPLICA_PROBE_S per process (`now() - pg_last_xact_replay_timestamp()`, bounded
by the last time its replay position had reached the primary's, so an idle primary does not
read as a lagging replica); pages show "as of" once it exceeds REPLICA_LAG_LABEL_S. A replica
that does not answer is left alone for REPLICA_RETRY_S and its reads go to the primary; a
page whose replica query fails is run again on the primary, never answered with a 500.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import MiddlewareNotUsed
from django.db import DatabaseError, InterfaceError, OperationalError, connections
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

log = logging.getLogger(__name__)

PRIMARY, REPLICA = "default", "replica"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PIN_COOKIE = "read_primary"  # the primary's WAL position (bytes) after this user's last write
_PIN_CACHE_PREFIX = "replica-pin:"

T = TypeVar("T")


def configured() -> bool:
    return REPLICA in settings.DATABASES


# --- the scope: where this thread's or task's reads go ----------------------------------------


@dataclass
class Scope:
    replica: bool  # reads may go to the replica
    sticky: bool = True  # a write sends the scope's later reads to the primary
    wrote: bool = False
    used_replica: bool = False


_scope: contextvars.ContextVar[Scope | None] = contextvars.ContextVar(
    "greenops_db_scope", default=None
)


class ReplicaRouter:
    """settings.DATABASE_ROUTERS when a replica is configured."""

    def db_for_read(self, model, **hints) -> str:
        scope = _scope.get()
        if scope is None or not scope.replica or connections[PRIMARY].in_atomic_block:
            return PRIMARY
        scope.used_replica = True
        return REPLICA

    def db_for_write(self, model, **hints) -> str:
        scope = _scope.get()
        if scope is not None:
            scope.wrote = True
            if scope.sticky:
                scope.replica = False
        return PRIMARY

    def allow_relation(self, obj1, obj2, **hints) -> bool | None:
        # The replica holds the primary's rows: an object read there may point at one written
        # here (a GET that saves a snapshot of a team it read from the replica).
        return True if {obj1._state.db, obj2._state.db} <= {PRIMARY, REPLICA} else None

    def allow_migrate(self, db: str, app_label: str, **hints) -> bool:
        return db == PRIMARY  # the replica replays the primary's migrations


def read_connection():
    """The connection a raw SQL read should use now: the replica inside a page's or API read's
    scope (as the router sends the ORM's reads), else the primary. Raw cursors bypass the
    router, so the team page's fleet queries ask here."""
    return connections[ReplicaRouter().db_for_read(None)]


def task_started(task_id: str) -> None:
    """Celery task_prerun: a task reads the primary (a task that writes must not decide on
    stale rows), also when it runs eagerly inside a page request that reads the replica."""
    _task_tokens[task_id] = _scope.set(Scope(replica=False))


def task_finished(task_id: str) -> None:
    token = _task_tokens.pop(task_id, None)
    if token is not None:
        try:
            _scope.reset(token)
        except ValueError:  # set in another context: nothing of ours to restore here
            pass


_task_tokens: dict[str, contextvars.Token] = {}


# --- the replica's state ----------------------------------------------------------------------


@dataclass(frozen=True)
class ReplicaState:
    up: bool
    measured: float  # time.monotonic() of the measurement
    in_recovery: bool = True
    replay_lsn: int | None = None  # bytes of WAL replayed; None when not a standby
    lag_s: float | None = None  # None: cannot be told (never caught up, nothing replayed yet)
    as_of: dt.datetime | None = None  # the primary's state the replica showed when measured

    @property
    def usable(self) -> bool:
        return self.up and self.lag_s is not None

    def behind_s(self, now: dt.datetime | None = None) -> float | None:
        if self.as_of is None:
            return None
        return max(0.0, ((now or timezone.now()) - self.as_of).total_seconds())

    def has_replayed(self, lsn: int) -> bool:
        return not self.in_recovery or (self.replay_lsn is not None and self.replay_lsn >= lsn)


_REPLICA_SQL = (
    "SELECT pg_is_in_recovery(), pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '0/0')::bigint, "
    "extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8"
)
# The insert position, not pg_current_wal_lsn() (the write position): with asynchronous commit
# (synchronous_commit = off) a commit's record can still be in the WAL buffers when the
# response pins the user, and a pin short of it let the replica serve the old row.
_PRIMARY_LSN_SQL = "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint"

_state: ReplicaState | None = None
_caught_up: float | None = None  # monotonic time the replica last had all the primary had
_probing = threading.Lock()


def lag_from(
    in_recovery: bool,
    replay_lsn: int | None,
    replay_age_s: float | None,
    primary_lsn: int | None,
    since_caught_up_s: float | None,
) -> float | None:
    """Seconds the replica's data is behind the primary's; None when that cannot be told.

    now() - pg_last_xact_replay_timestamp() is the age of the last transaction replayed: on a
    primary with no commits for ten minutes it reads ten minutes though nothing is missing,
    and it is NULL until the replica replays its first transaction after a start. A replay
    position at or past the primary's (read just before) means nothing is missing; otherwise
    the data is no older than the last time that was seen, nor than the last replayed commit.
    """
    if not in_recovery:
        return 0.0  # not a standby (pointed at the primary itself): nothing to wait for
    if primary_lsn is not None and replay_lsn is not None and replay_lsn >= primary_lsn:
        return 0.0
    bounds = [max(0.0, b) for b in (replay_age_s, since_caught_up_s) if b is not None]
    return min(bounds) if bounds else None


def _measure() -> ReplicaState:
    global _caught_up
    wall, mono = timezone.now(), time.monotonic()
    try:
        with connections[PRIMARY].cursor() as cursor:
            cursor.execute(_PRIMARY_LSN_SQL)
            primary_lsn = cursor.fetchone()[0]
    except DatabaseError:  # the primary's own trouble is for its callers to meet
        primary_lsn = None
    try:
        with connections[REPLICA].cursor() as cursor:
            cursor.execute(_REPLICA_SQL)
            in_recovery, replay_lsn, replay_age_s = cursor.fetchone()
    except DatabaseError as exc:
        log.warning(
            "read replica unreachable, reading the primary for %s s: %s",
            settings.REPLICA_RETRY_S,
            exc,
        )
        _close(REPLICA)
        return ReplicaState(up=False, measured=mono)
    lag = lag_from(
        in_recovery,
        replay_lsn,
        replay_age_s,
        primary_lsn,
        None if _caught_up is None else mono - _caught_up,
    )
    if lag == 0.0 and in_recovery:
        _caught_up = mono
    return ReplicaState(
        up=True,
        measured=mono,
        in_recovery=in_recovery,
        replay_lsn=replay_lsn,
        lag_s=lag,
        as_of=None if lag is None else wall - dt.timedelta(seconds=lag),
    )


def replica_state() -> ReplicaState | None:
    """The replica's state, measured at most every REPLICA_PROBE_S (REPLICA_RETRY_S after it
    failed) per process; None when no replica is configured."""
    global _state
    if not configured():
        return None
    state = _state
    if state is not None:
        age = time.monotonic() - state.measured
        if age < (settings.REPLICA_PROBE_S if state.up else settings.REPLICA_RETRY_S):
            return state
    # One thread measures; the others keep the last state meanwhile (never wait on a probe).
    if not _probing.acquire(blocking=state is None):
        return state
    try:
        _state = _measure()
    finally:
        _probing.release()
    return _state


def mark_down() -> None:
    global _state
    _state = ReplicaState(up=False, measured=time.monotonic())
    _close(REPLICA)


def forget_state() -> None:
    """Measure afresh on the next read (tests; a process that knows the replica changed)."""
    global _state, _caught_up
    _state, _caught_up = None, None


def _close(alias: str) -> None:
    try:
        connections[alias].close()
    except DatabaseError:
        pass


def replica_failed(scope: Scope, exc: BaseException | None = None) -> bool:
    """Whether a failure in `scope` came from the replica (its connection recorded an error)."""
    if exc is not None and not isinstance(exc, OperationalError | InterfaceError):
        return False
    return scope.used_replica and bool(getattr(connections[REPLICA], "errors_occurred", False))


def replica_reads(fn: Callable[..., T], *args, **kwargs) -> T:
    """fn(*args, **kwargs) with its reads on the replica when one is configured, answers and
    is within REPLICA_LAG_LABEL_S; its writes go to the primary and do not move its later reads
    (a report writing its progress). A replica that fails midway: fn runs again on the primary.
    """
    state = replica_state()
    if state is None or not state.usable or state.behind_s() > settings.REPLICA_LAG_LABEL_S:
        return fn(*args, **kwargs)
    scope = Scope(replica=True, sticky=False)
    token = _scope.set(scope)
    try:
        return fn(*args, **kwargs)
    except (OperationalError, InterfaceError) as exc:
        if not replica_failed(scope, exc):
            raise
        log.warning(
            "read replica failed during %s, running it on the primary: %s",
            getattr(fn, "__qualname__", fn),
            exc,
        )
        mark_down()
    finally:
        _scope.reset(token)
    return fn(*args, **kwargs)


# --- requests: the pin and the "as of" label --------------------------------------------------


@dataclass(frozen=True)
class ReplicaLag:
    """What a page read from a replica that is behind: templates/_replica_lag.html."""

    as_of: dt.datetime
    behind_s: int


def lag_label(state: ReplicaState | None, now: dt.datetime | None = None) -> ReplicaLag | None:
    behind = state.behind_s(now) if state is not None else None
    if behind is None or behind <= settings.REPLICA_LAG_LABEL_S:
        return None
    return ReplicaLag(as_of=state.as_of, behind_s=round(behind))


def _pin_key(request: HttpRequest) -> str | None:
    auth = request.META.get("HTTP_AUTHORIZATION", "")
    if not auth:
        return None
    return _PIN_CACHE_PREFIX + hashlib.sha256(auth.encode()).hexdigest()[:32]


def pinned_lsn(request: HttpRequest) -> int | None:
    """The WAL position this client wrote up to, if it wrote within REPLICA_PIN_MAX_S."""
    values = []
    raw = request.COOKIES.get(PIN_COOKIE, "")
    if raw.isdigit() and len(raw) < 20:
        values.append(int(raw))
    key = _pin_key(request)
    if key is not None:
        cached = cache.get(key)
        if isinstance(cached, int):
            values.append(cached)
    return max(values) if values else None


def _primary_lsn() -> int | None:
    try:
        with connections[PRIMARY].cursor() as cursor:
            cursor.execute(_PRIMARY_LSN_SQL)
            return cursor.fetchone()[0]
    except DatabaseError:
        return None


class _RetryOnPrimary(HttpResponse):
    """process_exception's answer when the replica failed under a view: __call__ runs the
    request again on the primary (never sent; a 503 if it ever were)."""

    status_code = 503


class ReplicaReads:
    """Routes a request's reads (settings add it before SessionMiddleware when a replica is
    configured, so session reads and saves are routed and seen too)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        if not configured():
            raise MiddlewareNotUsed
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        safe = request.method in SAFE_METHODS
        pin = pinned_lsn(request) if safe else None
        state = replica_state() if safe else None
        use = bool(
            safe and state is not None and state.usable and (pin is None or state.has_replayed(pin))
        )
        request.replica_lag = lag_label(state) if use else None
        scope = Scope(replica=use)
        token = _scope.set(scope)
        try:
            response = self.get_response(request)
            if isinstance(response, _RetryOnPrimary) or (
                response.status_code >= 500 and replica_failed(scope)
            ):
                log.warning(
                    "read replica failed under %s %s; answered from the primary",
                    request.method,
                    request.path,
                )
                mark_down()
                scope.replica, scope.used_replica = False, False
                request.replica_lag = None
                response = self.get_response(request)
        finally:
            _scope.reset(token)
        if not safe or scope.wrote:
            self._pin(request, response)
        elif use and pin is not None:
            response.delete_cookie(PIN_COOKIE)  # the replica has this user's writes now
        return response

    def process_exception(self, request: HttpRequest, exception: Exception):
        scope = _scope.get()
        if (
            scope is not None
            and request.method in SAFE_METHODS
            and replica_failed(scope, exception)
        ):
            return _RetryOnPrimary()
        return None

    @staticmethod
    def _pin(request: HttpRequest, response: HttpResponse) -> None:
        lsn = _primary_lsn()
        if lsn is None:
            return
        max_age = settings.REPLICA_PIN_MAX_S
        response.set_cookie(
            PIN_COOKIE,
            str(lsn),
            max_age=max_age,
            httponly=True,
            samesite="Lax",
            secure=settings.SESSION_COOKIE_SECURE,
        )
        key = _pin_key(request)
        if key is not None:  # API clients keep no cookies: pin their token
            cache.set(key, lsn, timeout=max_age)
