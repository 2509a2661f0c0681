"""Celery beat for the embedded default: without Redis there is no beat process, so the same
schedule (settings.CELERY_BEAT_SCHEDULE) runs in a background thread of the web process, each
task executed in-process. Production runs `celery beat` instead (docker-compose.yml)."""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import close_old_connections, connection

from greenops.celery import app

log = logging.getLogger(__name__)


def run_due(next_run: dict[str, float], now: float) -> list[str]:
    """Run every schedule entry that is due; returns the names that ran."""
    app.loader.import_default_modules()
    ran = []
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        if now < next_run.get(name, 0.0):
            continue
        next_run[name] = now + float(entry["schedule"])
        try:
            result = app.tasks[entry["task"]].apply(kwargs=entry.get("kwargs", {}))
        except Exception:  # one failing task must not stop the others, or the thread
            log.exception("embedded beat: %s failed", name)
        else:
            # apply() records a task's failure in its result instead of raising it.
            if result.failed():
                log.error("embedded beat: %s failed\n%s", name, result.traceback)
            else:
                ran.append(name)
        finally:
            if not connection.in_atomic_block:  # the thread's own connection, between tasks
                close_old_connections()
    return ran


def start(stop: threading.Event, tick_s: float = 5.0) -> threading.Thread:
    next_run: dict[str, float] = {}

    def loop() -> None:
        while not stop.wait(tick_s):
            run_due(next_run, time.monotonic())

    thread = threading.Thread(target=loop, name="embedded-beat", daemon=True)
    thread.start()
    return thread
