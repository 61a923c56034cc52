"""Serve plotly.js from the `plotly` Python package as static/vendor/plotly.min.js (no CDN, no copy
in the repository): runserver/daphne find it here, and `collectstatic` copies it at collect time."""

from __future__ import annotations

from pathlib import Path

from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

VENDOR_PATH = "vendor/plotly.min.js"


def plotly_bundle() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


class PlotlyFinder(BaseFinder):
    def check(self, **kwargs) -> list:
        return []

    def find(self, path: str, find_all: bool = False, **kwargs) -> str | list[str]:
        if path != VENDOR_PATH:
            return [] if find_all else ""
        found = str(plotly_bundle())
        return [found] if find_all else found

    def list(self, ignore_patterns):
        bundle = plotly_bundle()
        storage = FileSystemStorage(location=str(bundle.parent))
        storage.prefix = "vendor"  # collectstatic writes <prefix>/<path>
        yield bundle.name, storage
