"""Serve plotly.min.js from the installed plotly package as static/vendor/plotly.min.js.

The bundle ships inside the Python package, so pages work offline and the JS always matches the
installed plotly version; collectstatic copies it like any other static file.
"""

from __future__ import annotations

from pathlib import Path

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
STATIC_NAME = "vendor/plotly.min.js"


class PlotlyFinder(BaseFinder):
    storage = FileSystemStorage(location=str(PLOTLY_JS.parent))

    def check(self, **kwargs):
        return []

    def find(self, path: str, find_all: bool = False, **kwargs):
        if path == STATIC_NAME:
            return [str(PLOTLY_JS)] if find_all else str(PLOTLY_JS)
        return [] if find_all else None

    def list(self, ignore_patterns):
        yield "plotly.min.js", _PrefixedStorage()


class _PrefixedStorage(FileSystemStorage):
    """collectstatic stores files under storage.prefix + path."""

    prefix = "vendor"

    def __init__(self) -> None:
        super().__init__(location=str(PLOTLY_JS.parent))
