"""A real Celery worker on Redis for the tests whose behaviour depends on one.

The worker listens on queues of its own (tests running beside it never share them): one per
queue group of settings.CELERY_TASK_ROUTES (ingest, rollups, alerts, reports), renamed
"<queue>.<group>", plus "<queue>" for anything unrouted, so a task reaches it through the same
routes as in production. It reads the test database. While it runs, this process routes tasks
to those queues too instead of running them eagerly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db import connection

from greenops import celery_app

ROOT = Path(__file__).resolve().parents[2]  # the repository

_WORKER = """
import sys
from tests.support.celery_worker import routes_for
from greenops.celery import app
app.conf.task_default_queue = sys.argv[1]  # tasks the worker itself enqueues stay on its queues
app.conf.task_routes, queues = routes_for(sys.argv[1])
app.worker_main(["worker", "-Q", ",".join(queues), "-c", "2", "--without-gossip",
                 "--without-mingle", "--without-heartbeat", "-l", "WARNING"])
"""


def routes_for(queue: str) -> tuple[dict, list[str]]:
    """settings.CELERY_TASK_ROUTES with each group's queue renamed "<queue>.<group>", and every
    queue a worker must consume to receive them all."""
    from django.conf import settings

    routes = {name: {**route, "queue": f"{queue}.{route['queue']}"}
              for name, route in settings.CELERY_TASK_ROUTES.items()}
    return routes, [queue, *dict.fromkeys(r["queue"] for r in routes.values())]


def use_queues(default_queue: str, routes) -> None:
    """Send this process's tasks by `routes`, the rest to `default_queue`. Celery reads both
    once, into a cached router and task sender (greenops.wsgi builds them when it loads, before
    a test's web can change them): both are rebuilt."""
    celery_app.conf.task_default_queue = default_queue
    celery_app.conf.task_routes = routes
    celery_app.amqp.flush_routes()
    for cached in ("router", "send_task_message"):
        celery_app.amqp.__dict__.pop(cached, None)


@contextmanager
def celery_worker(prefix: str) -> Iterator[tuple[str, list[bytes]]]:
    """Yields (queue, output): `output` holds the worker's stdout and stderr once it stopped."""
    queue = f"{prefix}-{uuid.uuid4().hex[:8]}"
    s = connection.settings_dict
    env = dict(os.environ, CELERY_TASK_ALWAYS_EAGER="false", DATABASE_URL=(
        f"postgres://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/"
        f"{s['NAME']}"))
    proc = subprocess.Popen([sys.executable, "-c", _WORKER, queue], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    old = (celery_app.conf.task_always_eager, celery_app.conf.task_default_queue,
           celery_app.conf.task_routes)
    celery_app.conf.task_always_eager = False
    use_queues(queue, routes_for(queue)[0])
    output: list[bytes] = []
    try:
        yield queue, output
    finally:
        celery_app.conf.task_always_eager = old[0]
        use_queues(old[1], old[2])
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        output.append(out)
