"""collectors.every.run_every: the fixed-rate loop of the agent's scrape, dcgm-exporter and
host-activity threads."""

from __future__ import annotations

import logging
import threading
import time

from collectors.every import run_every


def _run_for(seconds: float, interval_s: float, step) -> None:
    stop = threading.Event()
    t = threading.Thread(target=run_every, args=(interval_s, stop, step, "test round"))
    t.start()
    time.sleep(seconds)
    stop.set()
    t.join(2.0)
    assert not t.is_alive()


def test_a_failing_round_is_logged_and_the_loop_goes_on(caplog):
    calls = []

    def step():
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="collectors.every"):
        _run_for(0.35, 0.05, step)
    assert len(calls) >= 3  # rounds after the failure still ran
    assert "test round failed; continuing" in caplog.text


def test_an_overrunning_round_skips_the_missed_ones_instead_of_bunching():
    # Each round takes 0.12 s with a 0.05 s interval: rounds start on the schedule's grid
    # (multiples of 0.05 s after the first), never back to back to catch up.
    starts = []

    def step():
        starts.append(time.monotonic())
        time.sleep(0.12)

    _run_for(0.6, 0.05, step)
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert len(starts) >= 3
    # A round ending at 0.12 s waits for the 0.15 s slot; run back to back it would start at 0.12.
    assert all(g >= 0.14 for g in gaps), gaps
    assert all(g < 0.3 for g in gaps), gaps  # and none waits past the next free slot
