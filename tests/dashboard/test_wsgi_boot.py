"""A web worker imports every view as it boots, not inside the first request it serves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wsgi_module_loads_the_urlconf_and_the_apis(tmp_path: Path) -> None:
    # A fresh interpreter: this one has long imported everything.
    code = (
        "import sys, dashboard.wsgi; "
        "print(all(m in sys.modules for m in "
        "('dashboard.urls', 'runs.api', 'billing.api', 'runs.telemetry.sample_structs')))"
    )
    env = {**os.environ, "AIRBOARD_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "dashboard.settings"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "True"
