"""Opaque primitives are never in small candidates; every opaque ONNX node is a region alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from korch.candidates import CandidateLimits, enumerate_candidates, opaque_regions, region_candidates, why_not_candidate
from korch.frontend import fission
from korch.ir.check import check_graph
from korch.ir.graph import GraphBuilder
from korch.ir.opaque import OPAQUE, opaque_attrs
from korch.ir.ops import PrimClass
from korch.ir.types import DType, TensorType
from tests.opaque_models import RUNNABLE

# Generous limits, so that growth would reach an opaque primitive if it could.
WIDE = CandidateLimits(max_nodes=8, max_inputs=8, max_outputs=8, max_sets_per_seed=10_000)


@pytest.mark.parametrize("name", sorted(RUNNABLE))
def test_small_candidates_never_hold_an_opaque_primitive(name: str) -> None:
    graph = fission(RUNNABLE[name][0]())
    opaque = {k for k, n in enumerate(graph.nodes) if n.klass == PrimClass.OPAQUE}
    assert opaque
    candidates = enumerate_candidates(graph, WIDE)
    assert not any(opaque & set(c.nodes) for c in candidates)
    singles = {c.nodes[0] for c in candidates if c.size == 1}
    assert singles == set(range(len(graph.nodes))) - opaque
    for k in opaque:
        reason = why_not_candidate(graph, (k,), WIDE)
        assert reason is not None and "only an ONNX engine runs it" in reason


def test_a_set_around_an_opaque_node_is_not_convex() -> None:
    """a = relu(x), b = cumsum(a) (opaque), y = a + b: {relu, add} is connected, but a path leaves it
    through the opaque node and comes back."""
    b = GraphBuilder("g")
    x = b.add_input("x", TensorType((3, 4), DType.FLOAT32))
    a = b.emit("relu", [x])
    cumsum = helper.make_node("CumSum", ["a", "axis"], ["s"])
    s = b.emit(OPAQUE, [a, b.add_constant(np.array(1, np.int64))],
               opaque_attrs(cumsum, 0, {"": 17}, TensorType((3, 4), DType.FLOAT32)), origin="cumsum")
    graph = check_graph(b.build([("y", b.emit("add", [a, s]))]))
    reason = why_not_candidate(graph, (0, 2), WIDE)
    assert reason is not None and reason.startswith("not convex")
    assert {c.nodes for c in enumerate_candidates(graph, WIDE)} == {(0,), (2,)}


@pytest.mark.parametrize("name", sorted(RUNNABLE))
def test_every_opaque_node_is_a_region_alone(name: str) -> None:
    build, opaque_nodes = RUNNABLE[name]
    graph = fission(build())
    alone = {r.onnx_nodes for r in region_candidates(graph) if len(r.onnx_nodes) == 1}
    assert {(n,) for n in opaque_nodes} <= alone
    assert {r.onnx_nodes for r in opaque_regions(graph)} == {(n,) for n in opaque_nodes}
    for region in opaque_regions(graph):
        assert all(graph.nodes[i].klass == PrimClass.OPAQUE for i in region.nodes)
