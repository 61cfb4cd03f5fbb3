"""The HTML report file: self-contained, with the data the page needs; the CLI with and without a database."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from korch.cli import main
from korch.report.data import BENCH_FILE
from tests.report.conftest import SavedPlan


def page_data(html: str) -> dict:
    match = re.search(r'<script id="data" type="application/json">(.*?)</script>', html, re.S)
    assert match is not None
    return json.loads(match.group(1))


def test_report_is_self_contained_and_complete(candy_plan: SavedPlan, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(candy_plan.path), "-o", str(out), "--cache", str(candy_plan.cache)]) == 0
    html = out.read_text()
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', html), "the page must not load anything"
    assert "<link" not in html and "@import" not in html
    data = page_data(html)
    plan = candy_plan.plan
    assert len(data["prims"]) == len(plan.graph.nodes)
    assert [k["nodes"] for k in data["kernels"]] == [list(s.nodes) for s in plan.steps]
    assert sum(b[1] == "prim" for b in data["boxes"]) == len(plan.graph.nodes)
    assert all("rivals" in k for k in data["kernels"]) and any(k["rivals"] for k in data["kernels"])
    assert data["bench"] is None and data["summary"]["primitives"] == len(plan.graph.nodes)
    assert data["summary"]["measured_ms"] > 0 and "split plan" in data["summary"]["why"]


def test_report_without_database_and_with_bench(candy_plan: SavedPlan, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    plan_dir = tmp_path / "plan"
    plan_dir.mkdir()
    for f in candy_plan.path.iterdir():
        (plan_dir / f.name).write_bytes(f.read_bytes())
    bench = {"model": "candy-mini", "threads": 1, "systems": {
        "korch": {"median_ms": 0.2, "p10_ms": 0.19, "p90_ms": 0.21, "peak_rss_mb": None},
        "onnxruntime": {"median_ms": 0.3, "p10_ms": 0.29, "p90_ms": 0.31, "peak_rss_mb": None}}}
    (plan_dir / BENCH_FILE).write_text(json.dumps(bench))
    out = tmp_path / "r.html"
    assert main(["-q", "report", str(plan_dir), "-o", str(out), "--cache", str(tmp_path / "none")]) == 0
    assert capsys.readouterr().out == ""
    assert not (tmp_path / "none").exists(), "a report never creates a profile database"
    data = page_data(out.read_text())
    assert data["bench"]["systems"]["onnxruntime"]["median_ms"] == 0.3
    assert "no profile database" in data["db"] and all("rivals" not in k for k in data["kernels"])


def test_report_of_a_missing_plan_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) != 0
    assert "not a korch plan" in capsys.readouterr().err
