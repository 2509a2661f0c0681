"""The read replica's rules without a replica (greenops/db_router.py): the lag arithmetic, the
"as of" threshold at its 60 s default, where each scope sends reads, the pin after a write, the
fall-back when the replica fails under a page, and the settings with and without
DATABASE_REPLICA_URL. test_replica.py proves the same rules on a real streaming replica."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest
from django.db import OperationalError, transaction
from django.http import HttpResponse
from django.test import RequestFactory
from django.utils import timezone

from greenops import db_router
from greenops.db_router import PRIMARY, REPLICA, ReplicaReads, ReplicaRouter, ReplicaState
from tests.support import ROOT
from tests.support.embedded import embedded_env

router = ReplicaRouter()


# --- lag -------------------------------------------------------------------------------------


def test_lag_is_zero_when_the_replica_has_replayed_what_the_primary_had():
    # The primary had no commit for 10 minutes: the last replayed transaction is 600 s old, but
    # the replay position (5,000) is past the primary's (4,096): nothing is missing.
    assert db_router.lag_from(True, 5_000, 600.0, 4_096, None) == 0.0
    assert db_router.lag_from(False, None, None, 4_096, None) == 0.0  # not a standby


def test_lag_is_the_age_of_the_last_replayed_commit_or_of_the_last_catch_up():
    # Behind (replayed 4,000 < 4,096): the last replayed commit is 75 s old -> 75 s.
    assert db_router.lag_from(True, 4_000, 75.0, 4_096, None) == 75.0
    # Its last commit is 600 s old but 4 s ago it had all the primary had -> 4 s.
    assert db_router.lag_from(True, 4_000, 600.0, 4_096, 4.0) == 4.0
    # The primary could not be asked: the replayed commit's age alone.
    assert db_router.lag_from(True, 4_000, 12.5, None, None) == 12.5
    # A replica clock ahead of the primary's makes the age negative: no lag, not negative lag.
    assert db_router.lag_from(True, 4_000, -3.0, 4_096, None) == 0.0


def test_no_replay_timestamp_yet_is_an_unknown_lag_and_reads_go_to_the_primary():
    # A replica just started from a base backup, behind, with nothing replayed since: NULL
    # timestamp, never seen caught up -> unknown, and an unknown lag is not usable.
    assert db_router.lag_from(True, 4_000, None, 4_096, None) is None
    state = ReplicaState(up=True, measured=0.0, replay_lsn=4_000, lag_s=None)
    assert not state.usable
    # Caught up, even without a timestamp: 0.
    assert db_router.lag_from(True, 4_096, None, 4_096, None) == 0.0


def _state(
    lag_s: float | None, now: dt.datetime, replay_lsn: int = 10_000, up: bool = True
) -> ReplicaState:
    return ReplicaState(
        up=up,
        measured=0.0,
        replay_lsn=replay_lsn,
        lag_s=lag_s,
        as_of=None if lag_s is None else now - dt.timedelta(seconds=lag_s),
    )


def test_the_as_of_label_appears_past_sixty_seconds(settings):
    assert settings.REPLICA_LAG_LABEL_S == 60.0  # the default
    now = dt.datetime(2026, 12, 4, 16, 30, 0, tzinfo=dt.UTC)
    assert db_router.lag_label(_state(60.0, now), now) is None  # exactly a minute: no label
    label = db_router.lag_label(_state(61.0, now), now)
    # 16:30:00 - 61 s = 16:28:59
    assert label == db_router.ReplicaLag(
        as_of=dt.datetime(2026, 12, 4, 16, 28, 59, tzinfo=dt.UTC), behind_s=61
    )
    # Measured 61 s behind, read 5 s later with no replay since: 66 s behind, same as-of.
    later = db_router.lag_label(_state(61.0, now), now + dt.timedelta(seconds=5))
    assert (later.as_of, later.behind_s) == (label.as_of, 66)
    assert db_router.lag_label(None, now) is None


# --- the router --------------------------------------------------------------------------------


def test_without_a_scope_everything_reads_the_primary():
    assert router.db_for_read(None) == PRIMARY  # commands, beat, workers
    assert router.db_for_write(None) == PRIMARY
    assert router.allow_migrate(PRIMARY, "telemetry") and not router.allow_migrate(REPLICA, "x")


def test_a_scope_reads_the_replica_until_it_writes_when_sticky():
    token = db_router._scope.set(db_router.Scope(replica=True))
    try:
        assert router.db_for_read(None) == REPLICA
        assert router.db_for_write(None) == PRIMARY
        assert router.db_for_read(None) == PRIMARY  # read-after-write in the same request
    finally:
        db_router._scope.reset(token)
    token = db_router._scope.set(db_router.Scope(replica=True, sticky=False))
    try:  # report generation writing its progress keeps its figures on the replica
        router.db_for_write(None)
        assert router.db_for_read(None) == REPLICA
    finally:
        db_router._scope.reset(token)


@pytest.mark.django_db
def test_reads_inside_a_transaction_go_to_the_primary():
    token = db_router._scope.set(db_router.Scope(replica=True))
    try:
        with transaction.atomic():
            assert router.db_for_read(None) == PRIMARY
    finally:
        db_router._scope.reset(token)


def test_a_task_reads_the_primary_even_inside_a_replica_request():
    token = db_router._scope.set(db_router.Scope(replica=True))
    try:
        db_router.task_started("t1")
        assert router.db_for_read(None) == PRIMARY
        db_router.task_finished("t1")
        assert router.db_for_read(None) == REPLICA
    finally:
        db_router._scope.reset(token)


def test_report_figures_read_the_replica_only_within_the_label_threshold(monkeypatch):
    now = timezone.now()
    seen = []

    def figures() -> str:
        seen.append(router.db_for_read(None))
        return "fig"

    monkeypatch.setattr(db_router, "replica_state", lambda: _state(0.0, now))
    assert db_router.replica_reads(figures) == "fig" and seen == [REPLICA]
    monkeypatch.setattr(db_router, "replica_state", lambda: _state(75.0, now))
    db_router.replica_reads(figures)
    assert seen[-1] == PRIMARY  # 75 s behind: a report must not miss that minute
    monkeypatch.setattr(db_router, "replica_state", lambda: _state(None, now, up=False))
    db_router.replica_reads(figures)
    assert seen[-1] == PRIMARY


def test_report_figures_run_again_on_the_primary_when_the_replica_fails(monkeypatch):
    now = timezone.now()
    monkeypatch.setattr(db_router, "replica_state", lambda: _state(0.0, now))
    monkeypatch.setattr(db_router, "replica_failed", lambda scope, exc=None: scope.used_replica)
    downs = []
    monkeypatch.setattr(db_router, "mark_down", lambda: downs.append(1))
    seen = []

    def figures() -> str:
        db = router.db_for_read(None)
        seen.append(db)
        if db == REPLICA:
            raise OperationalError("server closed the connection unexpectedly")
        return "fig"

    assert db_router.replica_reads(figures) == "fig"
    assert seen == [REPLICA, PRIMARY] and downs == [1]


# --- the middleware: pin, label, fall-back ---------------------------------------------------


@pytest.fixture
def replica(monkeypatch):
    """A configured replica whose state the test sets; the primary's WAL position is 9,000."""
    now = timezone.now()
    box = {"state": _state(0.0, now)}
    monkeypatch.setattr(db_router, "configured", lambda: True)
    monkeypatch.setattr(db_router, "replica_state", lambda: box["state"])
    monkeypatch.setattr(db_router, "_primary_lsn", lambda: 9_000)
    box["now"] = now
    return box


def serve(request, view=None):
    """One request through ReplicaReads; returns (response, where the view's reads went)."""
    seen = []

    def default_view(req):
        seen.append(router.db_for_read(None))
        return HttpResponse("ok")

    response = ReplicaReads(view or default_view)(request)
    return response, seen


def test_a_page_reads_the_replica_and_a_post_pins_the_writer(replica, settings):
    rf = RequestFactory()
    response, seen = serve(rf.get("/teams/vision/hosts/"))
    assert seen == [REPLICA] and "read_primary" not in response.cookies
    response, seen = serve(rf.post("/teams/vision/hosts/1/edit/"))
    assert seen == [PRIMARY]
    pin = response.cookies["read_primary"]
    assert (pin.value, pin["max-age"], pin["httponly"]) == ("9000", 600, True)
    # The writer's next page: the replica has replayed up to 8,000 < 9,000 -> the primary.
    replica["state"] = _state(0.0, replica["now"], replay_lsn=8_000)
    get = rf.get("/teams/vision/hosts/")
    get.COOKIES["read_primary"] = "9000"
    response, seen = serve(get)
    assert seen == [PRIMARY] and "read_primary" not in response.cookies
    # Replayed past it (9,500): the replica again, and the cookie is deleted.
    replica["state"] = _state(0.0, replica["now"], replay_lsn=9_500)
    response, seen = serve(get)
    assert seen == [REPLICA] and response.cookies["read_primary"]["max-age"] == 0


def test_a_get_that_writes_pins_too(replica):
    def view(req):
        router.db_for_write(None)  # e.g. a session saved
        return HttpResponse("ok")

    response, _ = serve(RequestFactory().get("/"), view)
    assert response.cookies["read_primary"].value == "9000"


def test_an_api_token_is_pinned_without_cookies(replica):
    rf = RequestFactory()
    serve(rf.post("/api/v1/teams/vision/alerts/rules", HTTP_AUTHORIZATION="Bearer gho_x"))
    replica["state"] = _state(0.0, replica["now"], replay_lsn=8_000)
    _, seen = serve(rf.get("/api/v1/teams/vision/alerts/rules", HTTP_AUTHORIZATION="Bearer gho_x"))
    assert seen == [PRIMARY]
    _, seen = serve(rf.get("/api/v1/teams/vision/alerts/rules", HTTP_AUTHORIZATION="Bearer gho_y"))
    assert seen == [REPLICA]  # another token wrote nothing


def test_a_lagging_replica_labels_the_page_and_a_down_one_is_not_read(replica):
    replica["state"] = _state(75.0, replica["now"])
    request = RequestFactory().get("/")
    _, seen = serve(request)
    assert seen == [REPLICA] and request.replica_lag.behind_s == 75
    replica["state"] = _state(None, replica["now"], up=False)
    request = RequestFactory().get("/")
    _, seen = serve(request)
    assert seen == [PRIMARY] and request.replica_lag is None


def test_a_replica_failing_under_a_page_is_answered_from_the_primary(replica, monkeypatch):
    monkeypatch.setattr(db_router, "replica_failed", lambda scope, exc=None: scope.used_replica)
    downs = []
    monkeypatch.setattr(db_router, "mark_down", lambda: downs.append(1))
    seen = []
    middleware = None

    def handler(req):  # what Django's handler does: the view, then process_exception
        db = router.db_for_read(None)
        seen.append(db)
        if db == REPLICA:
            return middleware.process_exception(req, OperationalError("connection refused"))
        return HttpResponse("from the primary")

    middleware = ReplicaReads(handler)
    request = RequestFactory().get("/teams/vision/hosts/")
    response = middleware(request)
    assert (response.status_code, response.content) == (200, b"from the primary")
    assert seen == [REPLICA, PRIMARY] and downs == [1]

    # A failure an inner middleware already turned into a 500 is retried the same way.
    seen.clear()

    def five_hundred(req):
        db = router.db_for_read(None)
        seen.append(db)
        return HttpResponse(status=500 if db == REPLICA else 200)

    assert ReplicaReads(five_hundred)(RequestFactory().get("/")).status_code == 200
    assert seen == [REPLICA, PRIMARY]


# --- settings ------------------------------------------------------------------------------------

_SHOW = (
    "import django; django.setup(); from django.conf import settings as s; "
    "print(sorted(s.DATABASES), s.DATABASE_ROUTERS, "
    "[m for m in s.MIDDLEWARE if 'db_router' in m or 'SessionMiddleware' in m], "
    "s.DATABASES.get('replica', {}).get('TEST', {}).get('MIRROR'))"
)


def _settings(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _SHOW],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_a_replica_url_nothing_is_routed(tmp_path):
    env = embedded_env(tmp_path)  # the embedded default: SQLite, one database
    env.pop("DATABASE_REPLICA_URL", None)
    out = _settings(env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        "['default'] [] ['django.contrib.sessions.middleware.SessionMiddleware'] None"
    )


def test_with_a_replica_url_the_alias_mirrors_default_in_tests(tmp_path):
    env = dict(
        embedded_env(tmp_path),
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/g",
        DATABASE_REPLICA_URL="postgres://postgres@127.0.0.1:5433/g",
    )
    out = _settings(env)
    assert out.returncode == 0, out.stderr
    # The router, the middleware just before sessions, and the replica's test database is
    # the primary's (a physical copy of the cluster holds it already).
    assert out.stdout.strip() == (
        "['default', 'replica'] ['greenops.db_router.ReplicaRouter'] "
        "['greenops.db_router.ReplicaReads', "
        "'django.contrib.sessions.middleware.SessionMiddleware'] default"
    )
    out = _settings(
        dict(embedded_env(tmp_path), DATABASE_REPLICA_URL="postgres://postgres@127.0.0.1:5433/g")
    )
    assert out.returncode != 0 and "needs a PostgreSQL DATABASE_URL" in out.stderr
