"""dcgm-exporter test helpers: a scripted metrics page over HTTP and a settable clock."""

from __future__ import annotations

URL = "http://localhost:9400/metrics"


class Pages:
    """A fetch that answers the given pages in turn (the last one again once they run out)."""

    def __init__(self, *pages: str) -> None:
        self.pages, self.calls = list(pages), 0

    def __call__(self, url: str, timeout_s: float) -> str:
        assert url == URL
        page = self.pages[min(self.calls, len(self.pages) - 1)]
        self.calls += 1
        return page


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now
