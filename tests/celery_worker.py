"""A real Celery worker on Redis for the tests whose behaviour depends on one.

The worker listens on a queue of its own (tests running beside it never share it), reads the
test database, and sends the tasks it enqueues itself to the same queue. While it runs, this
process queues tasks there too instead of running them eagerly.
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

ROOT = Path(__file__).resolve().parent.parent

_WORKER = """
import sys
from greenops.celery import app
app.conf.task_default_queue = sys.argv[1]  # tasks the worker itself enqueues stay on it
app.worker_main(["worker", "-Q", sys.argv[1], "-c", "2", "--without-gossip",
                 "--without-mingle", "--without-heartbeat", "-l", "WARNING"])
"""


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
    old = (celery_app.conf.task_always_eager, celery_app.conf.task_default_queue)
    celery_app.conf.task_always_eager = False
    celery_app.conf.task_default_queue = queue
    output: list[bytes] = []
    try:
        yield queue, output
    finally:
        celery_app.conf.task_always_eager, celery_app.conf.task_default_queue = old
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        output.append(out)
