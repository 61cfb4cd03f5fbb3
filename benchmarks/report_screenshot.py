"""Screenshot a korch report in headless chromium, with the costliest kernel selected.

    korch report PLAN_DIR -o report.html
    python benchmarks/report_screenshot.py report.html -o report.png [--kernel ID] [--width 1600 --height 1000]

Needs Debian's chromium (/usr/bin/chromium) and the playwright package (no `playwright install`).
Prints the page's console problems, if any, and the details panel text of the kernel it clicked.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path)
    parser.add_argument("-o", "--out", type=Path, required=True)
    parser.add_argument("--kernel", type=int, help="the kernel bar to click (default: the tallest)")
    parser.add_argument("--width", type=int, default=1600)
    parser.add_argument("--height", type=int, default=1000)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": args.width, "height": args.height})
        page.on("console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.goto(args.html.resolve().as_uri())
        page.wait_for_selector("body[data-ready='1']", timeout=60_000)
        bars = page.locator("#bars rect")
        if bars.count():
            index = args.kernel
            if index is None:
                heights = [float(bars.nth(i).get_attribute("height") or 0) for i in range(bars.count())]
                index = max(range(len(heights)), key=heights.__getitem__)
            bars.nth(index).click()
        page.screenshot(path=str(args.out))
        print(page.locator("#details").inner_text())
        browser.close()
    for line in problems:
        print("problem:", line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
