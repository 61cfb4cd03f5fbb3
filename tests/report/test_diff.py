"""`korch diff`: kernels matched by their primitives; backend, time, added and removed kernels."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from korch.candidates.candidate import boundary
from korch.cli import main
from korch.plan import Step, save_plan
from korch.report.diff import diff_plans, format_diff
from korch.report.facts import load_facts
from tests.report.conftest import SavedPlan


def test_plan_against_itself_has_no_changes(candy_plan: SavedPlan) -> None:
    facts = load_facts(candy_plan.path)
    d = diff_plans(facts, facts)
    assert d.same_graph and d.changes == () and d.unchanged == len(facts.kernels)


def test_changed_backend_time_and_merged_kernels(candy_plan: SavedPlan, tmp_path: Path) -> None:
    plan = candy_plan.plan
    steps = list(plan.steps)
    steps[0] = dataclasses.replace(steps[0], backend="inductor", cost_s=steps[0].cost_s * 2)
    steps[1] = dataclasses.replace(steps[1], cost_s=steps[1].cost_s / 2)
    merged = steps[2].nodes + steps[3].nodes
    inputs, outputs = boundary(plan.graph, merged)
    steps[2:4] = [Step("onnxruntime", merged, inputs, outputs, "merged", steps[2].cost_s)]
    other = save_plan(dataclasses.replace(plan, steps=tuple(steps)), tmp_path / "b")
    d = diff_plans(load_facts(candy_plan.path), load_facts(other))
    kinds = sorted(c.kind for c in d.changes)
    assert kinds == ["added", "backend", "removed", "removed", "time"]
    text = format_diff(d)
    assert "-> k0 inductor" in text and "1 added" in text and "2 removed" in text


def test_cli_diff(candy_plan: SavedPlan, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", str(candy_plan.path), str(candy_plan.path)]) == 0
    assert "0 removed" in capsys.readouterr().out
