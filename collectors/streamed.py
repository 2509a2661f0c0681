"""A long-running tool whose stdout is one report per line (neuron-monitor, tegrastats).

Both tools print a report every period on their own schedule, not when asked, so the agent
reads their output on a thread and keeps the latest report; a source's ``read`` then gives
that report once (``None`` until the next one arrives, as for dcgm-exporter: a repeated
report would book the same interval twice). A tool that exits or cannot be started leaves
the figures null, never stale: the reader says so in the log and the source stops reporting.
"""

from __future__ import annotations

import logging
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)

MAX_LINE = 4 * 1024 * 1024  # one neuron-monitor report on a 16-device trn2 is ~200 KB


class StreamUnavailable(RuntimeError):
    """The tool could not be started (not installed, not on PATH, no permission)."""


class LineStream:
    """Runs ``argv`` and hands each stdout line to ``on_line`` on a daemon thread."""

    def __init__(self, argv: Sequence[str], on_line: Callable[[str], None]) -> None:
        self.argv = list(argv)
        self._on_line = on_line
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - argv is the configured tool
                self.argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1
            )
        except OSError as exc:
            raise StreamUnavailable(f"cannot run {self.argv[0]} ({exc.strerror or exc})") from exc
        self._thread = threading.Thread(
            target=self._pump, name=f"{self.argv[0]}-reader", daemon=True
        )
        self._thread.start()

    def _pump(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if len(line) > MAX_LINE:
                log.warning("%s: a %d-character line skipped", self.argv[0], len(line))
                continue
            try:
                self._on_line(line)
            except Exception:  # a report the parser trips on must not end the reading
                log.exception("%s: a report could not be read; skipped", self.argv[0])
        log.warning(
            "%s exited (status %s): its devices report no figures until the agent restarts",
            self.argv[0],
            self._proc.poll(),
        )

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()


def json_path(doc: Any, *keys: str) -> Any:
    """doc[k1][k2]... through nested JSON objects; None where a level is missing or not an
    object (a tool's output that lacks a field, or has another shape)."""
    for key in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc
