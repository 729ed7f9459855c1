"""plotly.js comes from the pinned plotly package (dashboard/staticfinders.py), not a vendored copy."""

from __future__ import annotations

import re
from pathlib import Path

import plotly
import pytest
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client

from dashboard.staticfinders import plotly_js_path

ROOT = Path(__file__).resolve().parents[2]


def test_the_pinned_package_carries_the_script_of_its_version() -> None:
    pinned = re.search(r"^plotly==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M)
    assert pinned is not None and plotly.__version__ == pinned.group(1)
    assert plotly_js_path().is_file()
    assert not (ROOT / "static" / "vendor" / "plotly.min.js").exists(), "one copy: the package's"


def test_the_finder_offers_that_file_alone() -> None:
    assert finders.find("vendor/plotly.min.js") == str(plotly_js_path())
    assert not finders.find("vendor/widgetbundle.js")
    assert not finders.find("vendor/datasets/iris.csv.gz")


@pytest.mark.django_db
def test_the_site_serves_it(client: Client) -> None:
    response = client.get("/static/vendor/plotly.min.js")
    assert response.status_code == 200
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert body == plotly_js_path().read_bytes()


def test_collectstatic_writes_it_where_the_pages_point(settings, tmp_path: Path) -> None:
    settings.STATIC_ROOT = tmp_path
    call_command("collectstatic", interactive=False, verbosity=0)
    assert (tmp_path / "vendor" / "plotly.min.js").read_bytes() == plotly_js_path().read_bytes()


def test_the_admin_keeps_its_own_static_files() -> None:
    assert finders.find("admin/css/base.css")
