"""One fixed-rate loop for the agent's background threads (inference-server scrapes,
dcgm-exporter, host activity)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


def run_every(interval_s: float, stop: threading.Event, step: Callable[[], object],
              what: str) -> None:
    """Call `step` every `interval_s` seconds on a fixed schedule until `stop` is set.

    Rounds keep to start + k x interval (a slow round does not shift the later ones), a round
    missed because one overran is skipped rather than run back to back, and an exception in a
    round is logged: the thread must outlive any bug in one round."""
    start = time.monotonic()
    tick = 0
    while not stop.is_set():
        try:
            step()
        except Exception:
            log.exception("%s failed; continuing", what)
        tick += 1
        now = time.monotonic()
        tick = max(tick, int((now - start) // interval_s) + 1)  # skip missed rounds
        stop.wait(start + tick * interval_s - now)
