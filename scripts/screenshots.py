"""Screenshots of the main pages for the README, taken in Debian's Chromium with Playwright.

Usage: python scripts/screenshots.py http://localhost:8000 docs/   (with the demo workspace seeded)
Nothing downloads a browser: it drives /usr/bin/chromium (AIRBOARD_CHROMIUM overrides).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dashboard.demo.constants import DEMO_PASSWORD_FILE, DEMO_USERNAME

CHROMIUM = os.environ.get("AIRBOARD_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]  # fmt: skip


# The workspace's own demo password, written by seed_demo (dashboard/demo/constants.py).
VAR_DIR = Path(os.environ.get("AIRBOARD_VAR_DIR", Path(__file__).resolve().parent.parent / "var"))


def main(base: str, out: Path, username: str = DEMO_USERNAME, password: str | None = None) -> None:
    password = password or (VAR_DIR / DEMO_PASSWORD_FILE).read_text().strip()
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
        page.goto(f"{base}/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password)
        page.click("button[type=submit], input[type=submit]")
        page.wait_for_url(re.compile(r".*/$"))
        page.screenshot(path=str(out / "overview.png"), full_page=False)
        page.goto(f"{base}/runs/")
        page.screenshot(path=str(out / "runs.png"), full_page=False)
        # The newest run with telemetry: the demo's live runs sort first among running ones.
        page.goto(f"{base}/runs/?status=running")
        page.click("table a[href^='/runs/']")
        page.wait_for_selector(".js-plotly-plot", timeout=15_000)
        page.screenshot(path=str(out / "run-page.png"), full_page=False)
        # The GPU charts and the log viewer, as an engineer scrolls to them.
        top = page.locator("#gpus").bounding_box()["y"] - 16
        page.screenshot(
            path=str(out / "run-telemetry.png"), full_page=True, clip={"x": 0, "y": top, "width": 1400, "height": 1000}
        )
        # Who is over budget: the demo's over-budget policy, its burn-down and its spend by user.
        page.goto(f"{base}/costs/policies/")
        page.click("a:text('vision-gpu-training')")
        page.wait_for_selector("[data-figure=burn-down] .main-svg", timeout=15_000)
        page.screenshot(path=str(out / "policy.png"), full_page=False)
        top = page.locator("#spend-by-user").bounding_box()["y"] - 16
        page.screenshot(
            path=str(out / "policy-split.png"), full_page=True, clip={"x": 0, "y": top, "width": 1400, "height": 1000}
        )
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1].rstrip("/"), Path(sys.argv[2]))
