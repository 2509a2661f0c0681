"""Shared fixtures. Tests run against real PostgreSQL (and Redis where a worker is involved).

The three users -- owner, member, outsider -- follow healthchecks' habit: every view gets an
access test against someone who must not see it.
"""

from __future__ import annotations

import gzip
import time
import uuid

import orjson
import pytest


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


@pytest.fixture(autouse=True)
def _price_catalog_after_a_flush(request):
    """A transactional test ends by flushing every table, which empties what the data migrations
    loaded: the bundled price catalog. pytest-django runs those tests after all the others, so
    only they can meet an emptied catalog, and then only in a whole-suite run (a smaller-GPU
    diagnosis silently went missing). Give the catalog back before each of them."""
    if not flushes_database(request.node):
        return
    request.getfixturevalue("transactional_db")
    from greenops.costs import catalog
    from greenops.costs.models import Price

    if not Price.objects.exists():
        catalog.load_snapshots()


@pytest.fixture(autouse=True)
def _no_rate_limits(settings):
    # Failed-attempt counters live in Redis and would carry over between tests and runs;
    # tests/test_ratelimit.py turns them on for itself.
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


def make_host(team, name: str = "gpu-node-1", gpus: int = 2):
    from greenops.telemetry.models import Gpu, Host

    host = Host(team=team, name=name, instance_type="p4d.24xlarge", region="us-east-1",
                provider="aws")
    token = host.set_new_token()
    host.save()
    for i in range(gpus):
        Gpu.objects.create(host=host, index=i, uuid=f"GPU-{uuid.uuid4()}",
                           name="NVIDIA A100-SXM4-40GB", power_limit_w=400.0)
    return host, token


@pytest.fixture
def host(team):
    return make_host(team)


def make_batch(n_per_gpu: int = 5, gpus=(0, 1), start: float | None = None, step: float = 1.0,
               source: str = "nvml", **overrides) -> dict:
    """A valid wire-format v1 batch: n_per_gpu samples for each GPU, one per `step` seconds."""
    start = time.time() - n_per_gpu * step - 5 if start is None else start
    cols: dict[str, list] = {k: [] for k in (
        "ts", "gpu_index", "util_pct", "mem_used_mib", "power_w", "energy_mj", "energy_j",
        "energy_method", "temp_c", "sm_clock_mhz")}
    for g in gpus:
        for i in range(n_per_gpu):
            cols["ts"].append(start + i * step)
            cols["gpu_index"].append(g)
            cols["util_pct"].append(50.0 + g)
            cols["mem_used_mib"].append(1024.0)
            cols["power_w"].append(200.0 + 10 * g)
            cols["energy_mj"].append(1_000_000 + int(i * step * (200 + 10 * g) * 1000))
            cols["energy_j"].append(None if i == 0 else step * (200.0 + 10 * g))
            cols["energy_method"].append(None if i == 0 else "counter")
            cols["temp_c"].append(60.0)
            cols["sm_clock_mhz"].append(1410.0)
    doc = {"batch_id": str(uuid.uuid4()), "agent_version": "0.1.0", "sent_at": time.time(),
           "source": source, "samples": cols}
    doc.update(overrides)
    return doc


def gz(doc) -> bytes:
    return gzip.compress(orjson.dumps(doc) if not isinstance(doc, bytes) else doc)


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
