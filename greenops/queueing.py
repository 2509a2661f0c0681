"""Queueing a Celery task from a request without making the broker a gate.

A task queued from a page (an invitation's mail, a report to generate) is recorded in a row
first, and beat's sweeps send again what was never picked up. So when Redis, the broker, is
down, the request must still succeed: the publish is tried once (CELERY_BROKER_TRANSPORT_OPTIONS'
max_retries is 0, so kombu does not hold the page retrying), and a failure is logged instead of
turned into a 500."""

from __future__ import annotations

import logging

from django.db import transaction

log = logging.getLogger(__name__)


def publish(task, *args) -> bool:
    """Queue `task(*args)` now; False (logged) if the broker refused."""
    try:
        task.delay(*args)
    except Exception:  # kombu raises several types for a broker that is down
        log.warning("could not queue %s%r; its sweep will send it again", task.name, args,
                    exc_info=True)
        return False
    return True


def publish_on_commit(task, *args) -> None:
    """Queue `task(*args)` once the current transaction commits (publish's rules)."""
    transaction.on_commit(lambda: publish(task, *args))
