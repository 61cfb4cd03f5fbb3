"""The layered drawing: every primitive drawn once, edges run downwards, boxes in a layer never overlap."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

from korch import zoo
from korch.pipeline import run_fission
from korch.report.facts import load_facts
from korch.report.layout import layout_graph
from tests.report.conftest import LARGE_PRIMITIVES, large_plan

# Generous bound for laying out 1,500 primitives (it takes ~0.1 s); catches accidental quadratic work.
LARGE_LAYOUT_SECONDS = 10.0


def check_layout(graph, layout) -> None:
    prims = [b for b in layout.boxes if b.kind == "prim"]
    assert sorted(b.ref for b in prims) == list(range(len(graph.nodes)))
    assert {b.ref for b in layout.boxes if b.kind == "input"} == set(graph.inputs)
    assert {b.ref for b in layout.boxes if b.kind == "output"} == set(graph.outputs)
    assert all(b.ref in graph.constants for b in layout.boxes if b.kind == "weight")
    by_id = {b.id: b for b in layout.boxes}
    for e in layout.edges:
        ys = [p[1] for p in e.points]
        assert ys == sorted(ys) and by_id[e.source].y < by_id[e.target].y, e
    rows = defaultdict(list)
    for b in layout.boxes:
        rows[b.y].append(b)
    for row in rows.values():
        row.sort(key=lambda b: b.x)
        for a, b in zip(row, row[1:]):
            assert a.x + a.w / 2 <= b.x - b.w / 2 + 1e-6, (a, b)
    assert all(0 <= b.x - b.w / 2 and b.x + b.w / 2 <= layout.width for b in layout.boxes)


def test_layout_of_a_branchy_model() -> None:
    graph = run_fission(zoo.to_model_proto("segformer-mini")).graph
    layout = layout_graph(graph)
    check_layout(graph, layout)
    producers = {n.output for n in graph.nodes} | set(graph.inputs)
    drawn = sum(1 for n in graph.nodes for v in dict.fromkeys(n.inputs) if v in producers)
    assert sum(e.target.startswith("p") and not e.source.startswith("w:") for e in layout.edges) == drawn


def test_large_graph_layout_is_fast(tmp_path: Path) -> None:
    facts = load_facts(large_plan(tmp_path / "large"))
    t0 = time.perf_counter()
    layout = layout_graph(facts.graph)
    assert time.perf_counter() - t0 < LARGE_LAYOUT_SECONDS
    assert len(facts.graph.nodes) == LARGE_PRIMITIVES
    check_layout(facts.graph, layout)
