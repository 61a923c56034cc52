"""Serve plotly.js from the `plotly` Python package as static/vendor/plotly.min.js (no CDN, no copy
in the repository): runserver/daphne find it here, and `collectstatic` copies it at collect time.

The bundle is 4.8 MB; a gzip copy beside it (1.4 MB) is what WhiteNoise sends to a browser that accepts gzip.
Both live in VAR_DIR/cache/plotly-<version>/, written once per plotly version (the package's own folder may be
read-only); where that cannot be written, the package's file is served as it is."""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from pathlib import Path

from django.conf import settings
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

VENDOR_PATH = "vendor/plotly.min.js"


def plotly_bundle() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def served_bundle() -> Path:
    """plotly.min.js with plotly.min.js.gz beside it, in the var cache (made here once, atomically)."""
    import plotly

    source = plotly_bundle()
    folder = Path(settings.VAR_DIR) / "cache" / f"plotly-{plotly.__version__}"
    bundle = folder / source.name
    if bundle.is_file() and bundle.with_name(bundle.name + ".gz").is_file():
        return bundle
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for target, write in ((bundle.with_name(bundle.name + ".gz"), _gzip_copy), (bundle, shutil.copyfile)):
            handle, temporary = tempfile.mkstemp(dir=folder, prefix=".partial-")
            os.close(handle)
            write(source, Path(temporary))
            os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide it from a file server of another user
            os.replace(temporary, target)  # a concurrent process sees the whole file or none
    except OSError:
        return source
    return bundle


def _gzip_copy(source: Path, target: Path) -> None:
    with open(source, "rb") as raw, gzip.open(target, "wb", compresslevel=9) as packed:
        shutil.copyfileobj(raw, packed)


class PlotlyFinder(BaseFinder):
    def check(self, **kwargs) -> list:
        return []

    def find(self, path: str, find_all: bool = False, **kwargs) -> str | list[str]:
        if path != VENDOR_PATH:
            return [] if find_all else ""
        found = str(served_bundle())
        return [found] if find_all else found

    def list(self, ignore_patterns):
        bundle = served_bundle()
        storage = FileSystemStorage(location=str(bundle.parent))
        storage.prefix = "vendor"  # collectstatic writes <prefix>/<path>
        yield bundle.name, storage
        if bundle.with_name(bundle.name + ".gz").is_file():
            yield bundle.name + ".gz", storage  # WhiteNoise serves it as the gzip encoding of the bundle
