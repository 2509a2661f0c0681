"""Django's Redis cache that degrades instead of failing: Redis is a cache, never a gate.

With Redis stopped, Django's RedisCache raises ConnectionError from every get/set, and every
caller -- the team home's snapshot, the login and enroll limits, the KPI generation -- turned it
into a 500. This backend answers from a per-process in-memory cache while Redis is unreachable
(a cache miss is computed, a limit counts per process), logs the outage once, and tries Redis
again after RETRY_AFTER_S, so a dead Redis costs one refused connection per process per few
seconds rather than one per call.

What is written to the fallback stays in that process: when Redis returns its older values
are read again (a snapshot keyed by generation simply misses; a limit window restarts), which is
the same as Redis losing its keys on a restart.
"""

from __future__ import annotations

import logging
import threading
import time

import redis
from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5.0  # how long a process answers from memory before trying Redis again


def _redis_errors() -> tuple[type[BaseException], ...]:
    return (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


class FailSoftRedisCache(RedisCache):
    def __init__(self, server, params) -> None:
        options = dict(params.get("OPTIONS") or {})
        # A Redis that hangs must not hold a page: bounded connect and read times.
        options.setdefault("socket_connect_timeout", 0.5)
        options.setdefault("socket_timeout", 1.0)
        super().__init__(server, {**params, "OPTIONS": options})
        self._fallback = LocMemCache(f"failsoft-{id(self)}", {"TIMEOUT": params.get("TIMEOUT",
                                                                                   300)})
        self._down_until = 0.0
        self._lock = threading.Lock()
        self._errors = _redis_errors()

    @property
    def degraded(self) -> bool:
        """True while this process answers from memory."""
        return time.monotonic() < self._down_until

    def _call(self, name: str, *args, **kwargs):
        if not self.degraded:
            try:
                return getattr(super(), name)(*args, **kwargs)
            except self._errors as exc:
                with self._lock:
                    first = self._down_until == 0.0
                    self._down_until = time.monotonic() + RETRY_AFTER_S
                if first:
                    log.warning("Redis cache unreachable (%s); answering from this process's "
                                "memory until it is back", exc)
        return getattr(self._fallback, name)(*args, **kwargs)

    def _recovered(self) -> None:
        if self._down_until and not self.degraded:
            with self._lock:
                if self._down_until:
                    self._down_until = 0.0
                    log.warning("Redis cache reachable again")


def _method(name: str):
    def call(self, *args, **kwargs):
        result = self._call(name, *args, **kwargs)
        if self._down_until and not self.degraded:
            self._recovered()
        return result

    call.__name__ = name
    return call


for _name in ("add", "get", "set", "touch", "delete", "get_many", "has_key", "incr",
              "set_many", "delete_many", "clear", "get_or_set", "decr"):
    setattr(FailSoftRedisCache, _name, _method(_name))
