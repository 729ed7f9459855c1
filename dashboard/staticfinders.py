"""plotly.js served from the pinned `plotly` package rather than a vendored copy.

`requirements.txt` pins plotly; the wheel carries the matching `plotly.min.js` in its
`package_data`. This finder offers that one file, and nothing else of the package, at
`vendor/plotly.min.js`, so the pages' `{% static 'vendor/plotly.min.js' %}` and WhiteNoise (which
serves through the finders) read the pinned version: one version, upgraded with the pin.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_JS = "plotly.min.js"
PREFIX = "vendor"


def plotly_js_path() -> Path:
    """The pinned package's plotly.min.js on disk."""
    return Path(str(resources.files("plotly") / "package_data" / PLOTLY_JS))


class PlotlyFinder(BaseFinder):
    """Finds `vendor/plotly.min.js` in the installed plotly package."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=plotly_js_path().parent)
        self.storage.prefix = PREFIX  # type: ignore[attr-defined]  # read by collectstatic, as FileSystemFinder sets it

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:  # str, or a list when find_all
        if path != f"{PREFIX}/{PLOTLY_JS}":
            return []  # "not here", as Django's own finders say it
        found = str(plotly_js_path())
        return [found] if find_all or kwargs.get("all") else found

    def list(self, ignore_patterns: Any) -> Iterator[tuple[str, FileSystemStorage]]:
        yield PLOTLY_JS, self.storage
