"""Screenshots of the main pages for the README, taken in Debian's Chromium with Playwright.

Usage: python scripts/screenshots.py http://localhost:8000 docs/   (with the demo workspace seeded)
Nothing downloads a browser: it drives /usr/bin/chromium (AIRBOARD_CHROMIUM overrides).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dashboard.demo.constants import DEMO_PASSWORD_FILE, DEMO_USERNAME

CHROMIUM = os.environ.get("AIRBOARD_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]  # fmt: skip


# Running 8xH100 runs opened at most, looking for a multi-node one.
MAX_RUNS_TRIED = 20

# The workspace's own demo password, written by seed_demo (dashboard/demo/constants.py).
VAR_DIR = Path(os.environ.get("AIRBOARD_VAR_DIR", Path(__file__).resolve().parent.parent / "var"))


def _page_y(page: Page, selector: str) -> float:
    """The element's top in page coordinates (a full-page clip's), whatever the page is scrolled to."""
    return page.locator(selector).first.evaluate("(e) => e.getBoundingClientRect().top + window.scrollY")


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
        # A live multi-node 8xH100 run (the demo pushes every node's samples, NVLink included):
        # the first running one whose page offers the node selector.
        page.goto(f"{base}/runs/?status=running&accelerator=GPU_8xH100")
        links = page.locator("table.runs-table tbody td.run-id a").evaluate_all("(as) => as.map((a) => a.href)")
        for link in links[:MAX_RUNS_TRIED]:
            page.goto(link)
            if page.locator("#node-selector").count():
                break
        else:
            raise SystemExit("no running multi-node 8xH100 run with telemetry: seed the demo and let it tick")
        # The last 15 minutes, where every node has samples (the range picker).
        page.locator("#range-picker").get_by_role("link", name="15m").click()
        page.wait_for_url(re.compile(r"range=15m"))
        page.wait_for_selector(".js-plotly-plot", timeout=15_000)
        page.evaluate("window.scrollTo(0, 0)")  # the range link lands on #gpus: the facts are above
        page.screenshot(path=str(out / "run-page.png"), full_page=False)
        # The GPU telemetry card, as an engineer scrolls to it: range picker, coverage and
        # signals, the node selector with each node's skew, utilization and memory.
        top = _page_y(page, "#gpus") - 16
        page.screenshot(
            path=str(out / "run-telemetry.png"), full_page=True, clip={"x": 0, "y": top, "width": 1400, "height": 1000}
        )
        # One node picked: its SM and tensor activity, power against the limit, PCIe and NVLink.
        page.locator("#gpu-node").select_option("1")
        page.locator("#node-selector").get_by_role("button", name="Show").click()
        page.wait_for_url(re.compile(r"gpu_node=1"))
        page.wait_for_selector("[data-figure=fig-nvlink_tx_kbps] .main-svg", timeout=15_000)
        top = _page_y(page, "[data-figure=fig-sm_active]") - 40
        page.screenshot(
            path=str(out / "run-signals.png"), full_page=True, clip={"x": 0, "y": top, "width": 1400, "height": 1000}
        )
        top = _page_y(page, "[data-figure=fig-pcie_rx_kbps]") - 40
        page.screenshot(
            path=str(out / "run-links.png"), full_page=True, clip={"x": 0, "y": top, "width": 1400, "height": 1000}
        )
        # Who is over budget: the demo's over-budget policy, its burn-down and its spend by user.
        page.goto(f"{base}/costs/policies/")
        page.click("a:text('vision-gpu-training')")
        page.wait_for_selector("[data-figure=burn-down] .main-svg", timeout=15_000)
        page.screenshot(path=str(out / "policy.png"), full_page=False)
        top = _page_y(page, "#spend-by-user") - 16
        page.screenshot(
            path=str(out / "policy-split.png"), full_page=True, clip={"x": 0, "y": top, "width": 1400, "height": 1000}
        )
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1].rstrip("/"), Path(sys.argv[2]))
