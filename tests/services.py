"""Loaded as a pytest plugin (-p tests.services) so it runs before Django reads its settings:
tests use real PostgreSQL and Redis unless the environment points elsewhere."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/greenops")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
# The web process under test runs tasks in-process unless a test starts a real worker.
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "true")
# Live-server request threads must not keep connections open past their request, or the test
# database cannot be dropped at the end of the run.
os.environ.setdefault("DB_CONN_MAX_AGE", "0")
# Tests never ask a real cloud metadata service (169.254.169.254): agent subprocesses inherit this,
# and tests that exercise metadata point at a local fake instead.
os.environ.setdefault("GREENOPS_METADATA_URL", "off")
