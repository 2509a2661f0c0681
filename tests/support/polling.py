"""Waiting by polling, never by a fixed sleep: the check runs every `step` until `timeout`."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float = 60.0, step: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s")
