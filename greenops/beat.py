"""Beat tasks run one at a time: `@single_flight` below `@shared_task` makes a run that starts
while the previous run of the same task still works skip, instead of racing it (two catch-up
runs storing the same pending batch, two rollups overwriting each other's buckets, two
deliver_due passes queueing one notification twice).

The lock is a cache key (Redis SET NX in production, the in-process cache in the embedded
default, where beat is a thread of the web process). It expires after the task's hard time
limit (settings.BEAT_TASK_TIME_LIMITS_S) plus a margin, so a worker killed mid-run (SIGKILL,
hard time limit) cannot keep the task from ever running again.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.cache import cache

log = logging.getLogger(__name__)

LOCK_MARGIN_S = 30  # beyond the hard limit: the worker needs a moment to kill the child


def lock_key(task_name: str) -> str:
    return f"greenops:beat-lock:{task_name}"


def lock_ttl_s(task_name: str) -> int:
    _soft_s, hard_s = settings.BEAT_TASK_TIME_LIMITS_S[task_name]
    return int(hard_s) + LOCK_MARGIN_S


def single_flight(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run `fn` only if no other run of it holds the lock; a skipped run returns None."""
    task_name = f"{fn.__module__}.{fn.__name__}"

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        key, token = lock_key(task_name), uuid.uuid4().hex
        if not cache.add(key, token, timeout=lock_ttl_s(task_name)):
            log.warning("%s skipped: its previous run still holds %s", task_name, key)
            return None
        try:
            return fn(*args, **kwargs)
        finally:
            # Only our own lock: if this run outlived the TTL, a later run owns the key now.
            if cache.get(key) == token:
                cache.delete(key)

    return run
