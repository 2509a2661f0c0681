"""Loaded as a pytest plugin (-p tests.services) so it runs before Django reads its settings:
tests use real PostgreSQL and Redis unless the environment points elsewhere.

Under pytest-xdist every worker (gw0, gw1, ...) gets its own databases: pytest-django names the
test database test_<name>_gw<N>, and here the Redis database is counted down from the one in
REDIS_URL (default 15): gw0 -> 15, gw1 -> 14, ... (modulo 16, Redis' default 16 databases).
Redis holds the cache, rate-limit counters and the ingest kick key, which tests running side by
side must not share.
"""

import os
from urllib.parse import urlsplit, urlunsplit

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/greenops")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
# The web process under test runs tasks in-process unless a test starts a real worker.
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "true")
# Live-server request threads must not keep connections open past their request, or the test
# database cannot be dropped at the end of the run.
os.environ.setdefault("DB_CONN_MAX_AGE", "0")
# A test database need not wait for its WAL to reach the disk at each commit (a crash would lose
# at most the last moments of a database that is dropped anyway): the migrations that build each
# worker's test database, and every committing test, stop waiting on fsync. libpq reads PGOPTIONS
# in this process and in the subprocesses tests start; the faults stack drops it for its own
# web and worker, whose durability it tests.
os.environ.setdefault("PGOPTIONS", "-c synchronous_commit=off")
# Tests never ask a real cloud metadata service (169.254.169.254): agent subprocesses inherit this,
# and tests that exercise metadata point at a local fake instead.
os.environ.setdefault("GREENOPS_METADATA_URL", "off")


def redis_url_for_worker(url: str, worker: str | None) -> str:
    """REDIS_URL for an xdist worker ("gw3"): its database is the base database minus the
    worker's number, modulo 16. Outside xdist (worker None) the URL is unchanged."""
    if not worker:
        return url
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(base - int(worker.removeprefix('gw'))) % 16}"))


# xdist sets PYTEST_XDIST_WORKER in a worker before its pytest config, and so this plugin, loads.
# Subprocesses inherit both variables: the marker keeps a second load from shifting again.
_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker and os.environ.get("GREENOPS_TEST_REDIS_WORKER") != _worker:
    os.environ["REDIS_URL"] = redis_url_for_worker(os.environ["REDIS_URL"], _worker)
    os.environ["GREENOPS_TEST_REDIS_WORKER"] = _worker
