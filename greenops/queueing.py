"""Queueing a Celery task from a request without making the broker a gate.

A task queued from a page (an invitation's mail, a report to generate) is recorded in a row
first, and beat's sweeps send again what was never picked up. So when Redis, the broker, is
down, the request must still succeed: the publish is tried once (CELERY_BROKER_TRANSPORT_OPTIONS'
max_retries is 0, so kombu does not hold the page retrying), and a failure is logged instead of
turned into a 500."""

from __future__ import annotations

import logging
import threading

from django.core.signals import request_finished
from django.db import transaction

log = logging.getLogger(__name__)


def publish(task, *args) -> bool:
    """Queue `task(*args)` now; False (logged) if the broker refused."""
    try:
        task.delay(*args)
    except Exception:  # kombu raises several types for a broker that is down
        log.warning(
            "could not queue %s%r; its sweep will send it again", task.name, args, exc_info=True
        )
        return False
    return True


def publish_on_commit(task, *args) -> None:
    """Queue `task(*args)` once the current transaction commits (publish's rules)."""
    transaction.on_commit(lambda: publish(task, *args))


# Tasks a request queued to run after its response, in the embedded default (no broker, tasks
# in-process): per thread, run when the request finishes (the WSGI server closes the response
# after sending it), so the visitor never waits for them.
_after_response = threading.local()


def publish_after_response(task, *args) -> None:
    """Queue `task(*args)` on the broker (publish's rules); where tasks run in-process
    (CELERY_TASK_ALWAYS_EAGER), run it once this request's response has been sent instead of
    inside the view: at the end of this thread's request (a view calls it, nothing else)."""
    if not task.app.conf.task_always_eager:
        publish(task, *args)
        return
    pending = getattr(_after_response, "tasks", None)
    if pending is None:
        pending = _after_response.tasks = []
    pending.append((task, args))


def run_after_response() -> None:
    """The in-process tasks this thread's request queued (at request_finished)."""
    pending, _after_response.tasks = getattr(_after_response, "tasks", None) or [], []
    for task, args in pending:
        try:
            task.apply(args=args)
        except Exception:  # the response is sent; a failed refresh is retried by beat
            log.exception("in-process task %s%r after the response failed", task.name, args)


def _request_finished(**kwargs) -> None:
    run_after_response()  # looked up at each call, so a test can hold the tasks back


request_finished.connect(_request_finished, dispatch_uid="greenops.queueing.after_response")
