"""Driving a real agent subprocess: stop it and read its exit, wait for a condition."""

import signal
import subprocess
import time


def stop_agent(proc: subprocess.Popen) -> tuple[int, str, float]:
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=15)
    return proc.returncode, stderr, time.monotonic() - started


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
