"""Shared fixtures. Tests run against real PostgreSQL (and Redis where a worker is involved).

The three users -- owner, member, outsider -- follow healthchecks' habit: every view gets an
access test against someone who must not see it.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys

import orjson
import pytest

from tests.support import ROOT
from tests.support import browser as browser_support
from tests.support.embedded import DB_FILE, embedded_env

# make_batch, make_host and gz live in tests/support/factories.py; test modules written before
# the move import them from here, so they stay importable from tests.conftest.
from tests.support.factories import gz, make_batch, make_host  # noqa: F401


@pytest.fixture(scope="session", autouse=True)
def _close_stray_connections(django_db_setup, django_db_blocker):
    """Live-server threads can outlive their last request with a connection open, which would
    stop the test database from being dropped. Depending on django_db_setup makes this teardown
    run first."""
    yield
    from django.db import DatabaseError, connection

    with django_db_blocker.unblock():
        if connection.vendor != "postgresql" or not connection.settings_dict["NAME"].startswith(
                "test_"):
            return  # no test database was made in this run (no test used the database)
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
        except DatabaseError:
            pass


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # PBKDF2's deliberate slowness costs ~0.5 s per user; tests don't need it.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def flushes_database(node) -> bool:
    """A transactional test (or one on a live server): pytest-django flushes every table after
    it instead of rolling back."""
    marker = node.get_closest_marker("django_db")
    transactional = marker is not None and bool(
        marker.kwargs.get("transaction") or (marker.args and marker.args[0]))
    return transactional or bool(
        {"live_server", "transactional_db"} & set(getattr(node, "fixturenames", ())))


# Where the rows the migrations left (the bundled price catalog, content types, permissions)
# are kept for the run, outside the tables a flush empties.
KEEP_SCHEMA = "test_migrated_rows"


def reset_to_migrated(self) -> None:
    """TransactionTestCase._fixture_teardown for PostgreSQL: leave every table as the migrations
    left it, the way Django's flush does (TRUNCATE of every table, then post_migrate re-creates
    content types and permissions, then `_price_catalog_after_a_flush` re-loaded the catalog
    row by row) but in one short transaction: DELETE, which on a nearly empty table costs far
    less than TRUNCATE's new files for the table and each of its ~3 indexes, then the kept rows
    copied back. It took ~2.5 s a transactional test on 2 cores, 65 of them in the suite."""
    from django.db import connections, transaction

    for alias in self._databases_names(include_mirrors=False):
        connection = connections[alias]
        tables = connection.introspection.django_table_names(only_existing=True,
                                                             include_views=False)
        with transaction.atomic(using=alias), connection.cursor() as cursor:
            # Every foreign key is DEFERRABLE INITIALLY DEFERRED (Django's own; the schema has
            # no other), so the order of the DELETEs does not matter within the transaction.
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
            # A process the test started (a worker finishing a task, a web thread) may still
            # write. Lock every table first, as TRUNCATE would: otherwise a row committed
            # between two DELETEs (a host's terms period after costs_hosttermsperiod was
            # emptied, before telemetry_host) failed the deferred foreign key at COMMIT.
            cursor.execute("SET LOCAL lock_timeout = '60s'")
            cursor.execute("LOCK TABLE " + ", ".join(f'"{t}"' for t in tables)
                           + " IN ACCESS EXCLUSIVE MODE")
            for table in tables:
                cursor.execute(f'DELETE FROM "{table}"')
            for table in _KEPT.get(alias, ()):
                cursor.execute(f'INSERT INTO "{table}" SELECT * FROM {KEEP_SCHEMA}."{table}"')


_KEPT: dict[str, list[str]] = {}


@pytest.fixture(scope="session", autouse=True)
def _rows_the_migrations_left(django_db_setup, django_db_blocker):
    """Copy, once per run, every row the migrations left in the test database into a schema of
    its own, and make a transactional test's teardown restore exactly those (reset_to_migrated)
    instead of Django's flush."""
    from django.db import connection
    from django.test import TransactionTestCase

    with django_db_blocker.unblock():
        if connection.vendor != "postgresql" or not connection.settings_dict["NAME"].startswith(
                "test_"):
            yield  # SQLite (no database in this run, or another backend): Django's own flush
            return
        kept = []
        with connection.cursor() as cursor:
            cursor.execute(f"DROP SCHEMA IF EXISTS {KEEP_SCHEMA} CASCADE")
            cursor.execute(f"CREATE SCHEMA {KEEP_SCHEMA}")
            for table in connection.introspection.django_table_names(only_existing=True,
                                                                     include_views=False):
                cursor.execute(f'SELECT EXISTS (SELECT FROM "{table}")')
                if cursor.fetchone()[0]:
                    cursor.execute(f'CREATE TABLE {KEEP_SCHEMA}."{table}" AS '
                                   f'SELECT * FROM "{table}"')
                    kept.append(table)
    _KEPT[connection.alias] = kept
    original = TransactionTestCase._fixture_teardown
    TransactionTestCase._fixture_teardown = reset_to_migrated
    try:
        yield
    finally:
        TransactionTestCase._fixture_teardown = original


@pytest.fixture(autouse=True)
def _no_rate_limits(settings):
    # Failed-attempt counters live in Redis and would carry over between tests and runs;
    # tests/core/test_ratelimit.py turns them on for itself.
    settings.RATELIMIT_ENABLED = False
    settings.AXES_ENABLED = False  # failed-login counts (django-axes, in the database)


@pytest.fixture
def users(db):
    from django.contrib.auth.models import User

    return {
        name: User.objects.create_user(name, f"{name}@example.com", "pw-" + name)
        for name in ("owner", "member", "outsider")
    }


@pytest.fixture
def team(users):
    from greenops.teams.models import Membership, Role, Team

    team = Team.objects.create(name="Vision")
    Membership.objects.create(team=team, user=users["owner"], role=Role.OWNER)
    Membership.objects.create(team=team, user=users["member"], role=Role.MEMBER)
    return team


@pytest.fixture
def other_team(users):
    from greenops.teams.models import Membership, Role, Team

    team = Team.objects.create(name="Speech")
    Membership.objects.create(team=team, user=users["outsider"], role=Role.OWNER)
    return team




@pytest.fixture
def host(team):
    return make_host(team)






@pytest.fixture
def post_batch(client, django_capture_on_commit_callbacks):
    """POST a batch; queued tasks run (eagerly) as they would after the request's commit."""

    def post(token: str, doc, *, gzip_body: bool = True, **headers):
        body = gz(doc) if gzip_body else (doc if isinstance(doc, bytes) else orjson.dumps(doc))
        extra = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
        if gzip_body:
            extra["HTTP_CONTENT_ENCODING"] = "gzip"
        extra.update(headers)
        with django_capture_on_commit_callbacks(execute=True):
            return client.post("/api/v1/samples", body, content_type="application/json", **extra)

    return post


@pytest.fixture
def team_roles(team, users):
    """One user per role in `team` (owner and member from `users`, plus admin and viewer), and
    the outsider, for permission-matrix tests: {"owner": user, ..., "outsider": user}."""
    from django.contrib.auth.models import User

    from greenops.teams.models import Membership, Role

    out = {"owner": users["owner"], "member": users["member"], "outsider": users["outsider"]}
    for role in (Role.ADMIN, Role.VIEWER):
        user = User.objects.create_user(str(role), f"{role}@example.com", f"pw-{role}")
        Membership.objects.create(team=team, user=user, role=role)
        out[str(role)] = user
    return out


@pytest.fixture(autouse=True)
def outbound_connects(monkeypatch):
    """Every connection greenops.outbound makes goes through this recorder: loopback passes to
    the real socket, anything else is recorded and refused, so no test sends a packet beyond
    127.0.0.0/8 or ::1 even by mistake. A test reads the list to prove what was attempted."""
    import ipaddress

    from greenops import outbound

    attempts: list[tuple] = []
    real = outbound._raw_connect

    def record(sock, address):
        attempts.append(tuple(address[:2]))
        if not ipaddress.ip_address(str(address[0]).split("%")[0]).is_loopback:
            raise ConnectionRefusedError(111, "test stub: only loopback is reachable")
        real(sock, address)

    monkeypatch.setattr(outbound, "_raw_connect", record)
    return attempts

@pytest.fixture
def page(monkeypatch):
    """A Chromium page (1280 x 900) through Playwright; tests/support/browser.py launches it."""
    # Playwright's sync API runs an event loop in this thread; the Django ORM calls made by the
    # test itself between page actions are still synchronous and safe. Only for this test:
    # left set, it leaked into later tests' subprocesses (check --deploy reported async.E001).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_support.CHROMIUM,
                                    args=browser_support.ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        pg = context.new_page()
        pg.set_default_timeout(20_000)
        try:
            yield pg
        finally:
            context.close()
            browser.close()


@pytest.fixture(scope="session")
def sqlite_migrated(tmp_path_factory, worker_id):
    """A database of the embedded default (SQLite) with every migration applied, made once per
    run and shared by its xdist workers (the first to need it migrates, under a file lock; the
    others wait for it and copy it). Tests that need a migrated SQLite database start from a
    copy, `embedded_env(tmp_path, sqlite_migrated)`, and never write to this file; a newcomer's
    first start (tests/core/test_embedded_default.py's demo test) still migrates from nothing.
    Migrating takes ~20 s of a core on a 2-core machine."""
    root = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        root = root.parent  # pytest-of-<user>/pytest-<N>/: the run's folder, above each worker's
    folder = root / "sqlite-migrated"
    with open(root / "sqlite-migrated.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "migrated").exists():
            shutil.rmtree(folder, ignore_errors=True)  # a worker's failed attempt
            folder.mkdir()
            out = subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT,
                                 env=embedded_env(folder), capture_output=True, text=True,
                                 timeout=600)
            assert out.returncode == 0, out.stdout + out.stderr
            (folder / "migrated").touch()
    return folder / DB_FILE
