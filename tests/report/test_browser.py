"""The report in a real headless browser (Debian's chromium via Playwright): loads cleanly, draws, reacts.

Skipped when /usr/bin/chromium or the playwright package is missing; CI installs both.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from korch.cli import main
from tests.report.conftest import LARGE_PRIMITIVES, SavedPlan, large_plan

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# The page sets body[data-ready] once drawn; a 1,500-primitive page takes about a second.
READY_TIMEOUT_MS = 30_000
LARGE_READY_SECONDS = 15.0

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is missing (pip install playwright)")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


def open_page(browser, html: Path) -> tuple[object, list[str]]:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("request", lambda r: None if r.url.startswith(("file:", "data:")) else problems.append(f"network {r.url}"))
    page.goto(html.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=READY_TIMEOUT_MS)
    return page, problems


def test_report_loads_draws_and_shows_a_kernel(browser, candy_plan: SavedPlan, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(candy_plan.path), "-o", str(out), "--cache", str(candy_plan.cache)]) == 0
    page, problems = open_page(browser, out)
    plan = candy_plan.plan
    assert page.locator("g.node.prim").count() == len(plan.graph.nodes)
    assert page.locator("g.node.input").count() == len(plan.graph.inputs)
    assert page.locator("g.node.weight").count() > 0
    assert page.locator("#bars rect").count() == len(plan.steps)
    page.locator("g.node.prim[data-i='1']").click()                 # near the top: in view at load
    details = page.locator("#details").inner_text()
    kernel = next(k for k, s in enumerate(plan.steps) if 1 in s.nodes)
    assert f"k{kernel}" in details and "onnxruntime" in details and "candidates it beat" in details.lower()
    assert plan.graph.nodes[1].origin in details
    summary = page.locator("#summary").inner_text()
    assert "measured" in summary and "why this plan" in summary and plan.summary["why"] in summary
    assert page.locator("g.node.prim.sel").count() == len(plan.steps[kernel].nodes)
    page.locator("#bars rect").nth(len(plan.steps) - 1).click()
    assert f"k{len(plan.steps) - 1}" in page.locator("#details").inner_text()
    page.locator("#colorby").select_option("backend")
    page.locator("#fit").click()
    assert problems == []


def test_large_report_stays_usable(browser, tmp_path: Path) -> None:
    out = tmp_path / "large.html"
    assert main(["report", str(large_plan(tmp_path / "large")), "-o", str(out), "--cache", str(tmp_path)]) == 0
    t0 = time.perf_counter()
    page, problems = open_page(browser, out)
    assert time.perf_counter() - t0 < LARGE_READY_SECONDS
    assert page.locator("g.node.prim").count() == LARGE_PRIMITIVES
    page.locator("#find").fill("Act_1400")
    page.locator("#find").press("Enter")
    assert "Act_1400" in page.locator("#details").inner_text()
    page.mouse.wheel(0, -300)
    assert problems == []


def _zoo_plans() -> list[tuple[str, Path | None]]:
    """Every mini zoo model (optimized here), plus full-size plans from benchmarks/zoo_bench.py when
    KORCH_ZOO_PLANS names its output directory (plans at DIR/<model>-t<threads>/plan)."""
    import os

    from korch import zoo

    cases: list[tuple[str, Path | None]] = [(m.name, None) for m in zoo.list_models() if m.mini]
    root = os.environ.get("KORCH_ZOO_PLANS")
    if root:
        cases += [(p.parent.name, p) for p in sorted(Path(root).glob("*/plan")) if (p / "plan.json").exists()]
    return cases


@pytest.mark.parametrize("name,plan_dir", _zoo_plans(), ids=lambda v: str(v) if isinstance(v, str) else "")
def test_every_zoo_report_opens(browser, name: str, plan_dir: Path | None, tmp_path: Path) -> None:
    from korch import zoo
    from korch.pipeline import optimize
    from korch.plan import load_plan, save_plan
    from korch.profile.database import ProfileDB
    from korch.settings import QUICK_CALIBRATION, QUICK_PROFILE, QUICK_SELECTION, OptimizeSettings

    # Only the page is under test here: short timings make the plans quickly (any plan will do).
    quick = OptimizeSettings(threads=1, backends=("onnxruntime",), profile=QUICK_PROFILE, selection=QUICK_SELECTION,
                             calibration=QUICK_CALIBRATION)
    cache = tmp_path / "cache"
    if plan_dir is None:
        cache.mkdir()
        with ProfileDB(cache / "profiles.sqlite") as db:
            plan, _, _ = optimize(zoo.to_model_proto(name), db, quick)
        plan_dir = save_plan(plan, tmp_path / "plan")
    plan = load_plan(plan_dir, "", "", check_origin=False)
    out = tmp_path / "report.html"
    assert main(["report", str(plan_dir), "-o", str(out), "--cache", str(cache)]) == 0
    page, problems = open_page(browser, out)
    assert page.locator("g.node.prim").count() == len(plan.graph.nodes)
    assert page.locator("#bars rect").count() == len(plan.steps)
    page.locator("#bars rect").nth(0).click()
    assert "k0" in page.locator("#details").inner_text()
    if len({plan.graph.nodes[i].origin for i in plan.steps[0].nodes}) > 12:      # long lists fold away
        assert page.locator("#details details").count() >= 1
    assert problems == []


def test_a_scheduled_plan_is_drawn_as_lanes_over_time(browser, tmp_path: Path) -> None:
    """Two branches run side by side, then their sum alone: the chart has a row per lane, the two
    lanes' first kernels start together, and a kernel's details give its threads and lane."""
    import random

    from korch.plan import save_plan
    from korch.plan.schedule import Lane, Schedule
    from tests.select.test_coschedule import branchy_graph, per_node_plan

    schedule = Schedule(((Lane((0, 1), 1), Lane((2, 3), 1)), (Lane((4,), 2),)))
    plan = per_node_plan(branchy_graph(random.Random(1), 2, 2), 2, schedule)
    out = tmp_path / "report.html"
    assert main(["report", str(save_plan(plan, tmp_path / "plan")), "-o", str(out), "--cache", str(tmp_path)]) == 0
    page, problems = open_page(browser, out)
    assert "schedule" in page.locator("#chart h3").inner_text().lower()
    bars = page.locator("#bars rect")
    assert bars.count() == len(plan.steps)
    first, second, alone = (bars.nth(k).bounding_box() for k in (0, 2, 4))
    assert first["x"] == pytest.approx(second["x"]) and first["y"] < second["y"] and alone["x"] > first["x"]
    bars.nth(2).click()
    details = page.locator("#details").inner_text()
    assert "1 of 2 thread(s)" in details and "lane 2" in details, details
    assert problems == []
